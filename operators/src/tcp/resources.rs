//! [`Resources`]: what connections share (SNAP §2.3): hosts, links and applications, from a
//! topology file and the connections' own addresses.
//!
//! The file, one declaration a line (`#` starts a comment):
//!
//! ```text
//! # link NAME CIDR_A CIDR_B: connections between an address in CIDR_A and one in CIDR_B cross it
//! link tor1-agg 10.1.0.0/24 10.2.0.0/16
//! # host NAME ADDRESS|CIDR: a readable name for a host
//! host db1 10.1.0.7
//! # app NAME [IP:]PORT...: connections to these server ports belong to the application
//! app redis 6379 10.1.0.9:6380
//! ```
//!
//! Every connection belongs to the hosts of both its ends. Without `app` lines, a
//! connection's application is its server port: the one of its two ports outside Linux's
//! ephemeral range (32768-60999), else the lower. Without `link` lines, a connection whose
//! packets crossed a router (their TTLs say so: [`Evidence::hops`](crate::tcp::problem::Evidence::hops))
//! between two subnets (IPv4 /24, IPv6 /64) shares each end's router with every other such
//! connection of that subnet: links named `router of 10.0.1.0/24`.
//!
//! State: the declarations of the topology file, read once at start; no state per connection
//! (a connection's resources are computed from its addresses when asked).

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use causeway_sources::Endpoint;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::tcp::problem::ConnId;

/// What kind of resource a set of connections shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// A host (one end of every connection of the set).
    Host,
    /// A link (or switch) that every connection of the set crosses.
    Link,
    /// An application (a server port, or an `app` line).
    App,
}

impl Scope {
    /// The name in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Host => "host",
            Scope::Link => "link",
            Scope::App => "app",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A topology file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct ResourcesError {
    /// The file.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Clone, Debug)]
struct LinkDecl {
    name: String,
    a: IpNet,
    b: IpNet,
}

#[derive(Clone, Debug)]
struct AppDecl {
    name: String,
    ip: Option<IpAddr>,
    port: u16,
}

/// Hosts, links and applications, and which of them a connection shares.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    links: Vec<LinkDecl>,
    hosts: Vec<(String, IpNet)>,
    apps: Vec<AppDecl>,
}

fn net(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{s}` is not an address or CIDR block"))
}

impl Resources {
    /// Parses the text of a topology file; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Resources, ResourcesError> {
        let mut r = Resources::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| ResourcesError {
                path: path.to_owned(),
                line: i + 1,
                message,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["link", name, a, b] => r.links.push(LinkDecl {
                    name: (*name).to_owned(),
                    a: net(a).map_err(err)?,
                    b: net(b).map_err(err)?,
                }),
                ["host", name, a] => r.hosts.push(((*name).to_owned(), net(a).map_err(err)?)),
                ["app", name, ports @ ..] if !ports.is_empty() => {
                    for p in ports {
                        let (ip, port) = match p.parse::<Endpoint>() {
                            Ok(e) => (Some(e.ip), e.port),
                            Err(_) => (
                                None,
                                p.trim_start_matches(':')
                                    .parse::<u16>()
                                    .map_err(|_| err(format!("`{p}` is not a port or IP:PORT")))?,
                            ),
                        };
                        r.apps.push(AppDecl {
                            name: (*name).to_owned(),
                            ip,
                            port,
                        });
                    }
                }
                _ => {
                    return Err(err(format!(
                        "expected `link NAME CIDR CIDR`, `host NAME ADDRESS` or `app NAME PORT...`, found `{line}`"
                    )));
                }
            }
        }
        Ok(r)
    }

    /// Reads a topology file.
    pub fn load(path: &Path) -> Result<Resources, ResourcesError> {
        let text = std::fs::read_to_string(path).map_err(|e| ResourcesError {
            path: path.display().to_string(),
            line: 0,
            message: e.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn host_name(&self, ip: IpAddr) -> String {
        self.hosts
            .iter()
            .find(|(_, n)| n.contains(&ip))
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| ip.to_string())
    }

    fn app_name(&self, conn: &ConnId) -> Option<String> {
        for end in [conn.peer, conn.local] {
            if let Some(a) = self
                .apps
                .iter()
                .find(|a| a.port == end.port && a.ip.is_none_or(|ip| ip == end.ip))
            {
                return Some(a.name.clone());
            }
        }
        if !self.apps.is_empty() {
            return None;
        }
        let ephemeral = |p: u16| (32768..=60999).contains(&p);
        let port = match (ephemeral(conn.local.port), ephemeral(conn.peer.port)) {
            (true, false) => conn.peer.port,
            (false, true) => conn.local.port,
            _ => conn.local.port.min(conn.peer.port),
        };
        Some(format!("port {port}"))
    }

    /// Every resource `conn` shares with others: its two hosts, the links it crosses, its
    /// application. `hops`: how many routers its packets crossed, where a capture showed it.
    pub fn of(&self, conn: &ConnId, hops: Option<u8>) -> Vec<(Scope, String)> {
        let mut out = vec![(Scope::Host, self.host_name(conn.local.ip))];
        let peer = self.host_name(conn.peer.ip);
        if out[0].1 != peer {
            out.push((Scope::Host, peer));
        }
        let (x, y) = (conn.local.ip, conn.peer.ip);
        for l in &self.links {
            if (l.a.contains(&x) && l.b.contains(&y)) || (l.a.contains(&y) && l.b.contains(&x)) {
                out.push((Scope::Link, l.name.clone()));
            }
        }
        if self.links.is_empty() && hops.is_some_and(|h| h > 0) {
            let (a, b) = (subnet(x), subnet(y));
            if a != b {
                out.push((Scope::Link, format!("router of {a}")));
                out.push((Scope::Link, format!("router of {b}")));
            }
        }
        if let Some(app) = self.app_name(conn) {
            out.push((Scope::App, app));
        }
        out
    }
}

/// The subnet an address is taken to be in when no topology says: its IPv4 /24 or IPv6 /64.
fn subnet(ip: IpAddr) -> IpNet {
    let prefix = if ip.is_ipv4() { 24 } else { 64 };
    IpNet::new(ip, prefix).map_or(IpNet::from(ip), |n| n.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(local: &str, peer: &str) -> ConnId {
        ConnId {
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            ..ConnId::default()
        }
    }

    #[test]
    fn a_connection_shares_hosts_links_and_its_app() {
        let r = Resources::parse(
            "link lossy 10.88.1.0/24 10.88.1.0/24 # both ends on it\nhost agg 10.88.5.2\napp web 8080\n",
            "t",
        )
        .unwrap();
        let of = r.of(&conn("10.88.1.1:45000", "10.88.1.2:8080"), None);
        assert_eq!(
            of,
            vec![
                (Scope::Host, "10.88.1.1".to_owned()),
                (Scope::Host, "10.88.1.2".to_owned()),
                (Scope::Link, "lossy".to_owned()),
                (Scope::App, "web".to_owned()),
            ]
        );
        assert_eq!(
            r.of(&conn("10.88.5.1:7000", "10.88.5.2:45000"), None)[1].1,
            "agg"
        );
    }

    #[test]
    fn without_app_lines_the_server_port_is_the_app() {
        let r = Resources::default();
        let of = r.of(&conn("10.0.0.1:7001", "10.0.0.2:40000"), None);
        assert_eq!(of.last().unwrap(), &(Scope::App, "port 7001".to_owned()));
    }

    #[test]
    fn a_routed_connection_shares_the_routers_of_both_subnets() {
        let r = Resources::default();
        let routed = r.of(&conn("10.78.1.2:45000", "10.78.2.11:8080"), Some(1));
        assert!(routed.contains(&(Scope::Link, "router of 10.78.1.0/24".to_owned())));
        assert!(routed.contains(&(Scope::Link, "router of 10.78.2.0/24".to_owned())));
        // The same subnet, no TTL evidence, or nothing crossed: no router.
        for (a, b, hops) in [
            ("10.78.2.20:45000", "10.78.2.40:5432", Some(1)),
            ("10.78.1.2:45000", "10.78.2.11:8080", None),
            ("10.78.1.2:45000", "10.78.2.11:8080", Some(0)),
        ] {
            let of = r.of(&conn(a, b), hops);
            assert!(of.iter().all(|(s, _)| *s != Scope::Link), "{of:?}");
        }
        // A topology's links are the links.
        let declared = Resources::parse("link wan 10.78.1.0/24 10.78.2.0/24\n", "t").unwrap();
        let of = declared.of(&conn("10.78.1.2:45000", "10.78.2.11:8080"), Some(1));
        let links: Vec<_> = of.iter().filter(|(s, _)| *s == Scope::Link).collect();
        assert_eq!(links, vec![&(Scope::Link, "wan".to_owned())]);
    }

    #[test]
    fn bad_lines_name_the_line() {
        let e = Resources::parse("\nlink x 10.0.0.0/8\n", "topo.txt").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("topo.txt:2: expected"));
        let e = Resources::parse("app x http\n", "t").unwrap_err();
        assert!(e.message.contains("`http`"));
    }
}
