//! Node names: which computation an address belongs to (DESIGN.md, "Names").
//!
//! A names file maps addresses to readable node names, one `ADDRESS NAME [ROLE]` per line as
//! in `/etc/hosts`; ADDRESS is an IP or `IP:port` (`[v6]:port`); the optional ROLE groups
//! interchangeable servers for `--aggregate roles`. `#` starts a comment. An
//! `IP:port` entry wins over an `IP` entry. Without an entry, an endpoint's node is its IP (the
//! host), and a trace's named address is its own node.
//!
//! State: the names file's table, read once at start; [`NodeCache`] holds unnamed endpoints'
//! names, cleared past its capacity.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use causeway_sources::{Address, Endpoint};

/// A node's name (WAP5 §2.5: a host, or a process): shared, so that the many records that
/// carry it copy a pointer, not the text.
pub type NodeName = Arc<str>;

/// Unnamed endpoints' node names (their IPs as text), kept by one operator so that an IP is
/// formatted once, not once per record. Bounded: cleared past [`NodeCache::CAPACITY`] entries.
#[derive(Debug, Default)]
pub struct NodeCache {
    unnamed: crate::FastMap<IpAddr, NodeName>,
}

impl NodeCache {
    /// Most unnamed IPs kept.
    pub const CAPACITY: usize = 65_536;

    /// [`Names::node_of_endpoint`], formatting each unnamed IP once.
    pub fn node_of_endpoint(&mut self, names: &Names, endpoint: &Endpoint) -> NodeName {
        if let Some(n) = names
            .by_endpoint
            .get(endpoint)
            .or_else(|| names.by_ip.get(&endpoint.ip))
        {
            return Arc::clone(n);
        }
        if let Some(n) = self.unnamed.get(&endpoint.ip) {
            return Arc::clone(n);
        }
        if self.unnamed.len() >= Self::CAPACITY {
            self.unnamed.clear();
        }
        let n: NodeName = endpoint.ip.to_string().into();
        self.unnamed.insert(endpoint.ip, Arc::clone(&n));
        n
    }

    /// [`Names::node_of`], formatting each unnamed IP once.
    pub fn node_of(&mut self, names: &Names, address: &Address) -> NodeName {
        match address {
            Address::Endpoint(e) => self.node_of_endpoint(names, e),
            Address::Name(n) => n.as_str().into(),
        }
    }
}

/// Why a names file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum NamesError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not `ADDRESS NAME`.
    #[error("{path}:{line}: expected `ADDRESS NAME` with ADDRESS an IP or IP:port, found `{text}`")]
    BadLine {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
}

/// Address-to-node-name table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    by_endpoint: crate::FastMap<Endpoint, NodeName>,
    by_ip: crate::FastMap<IpAddr, NodeName>,
    roles: crate::FastMap<String, String>,
}

impl Names {
    /// An empty table: every endpoint is named after its IP.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads a names file.
    pub fn load(path: &Path) -> Result<Names, NamesError> {
        let text = std::fs::read_to_string(path).map_err(|source| NamesError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Names::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a names file; `path` is used in error messages.
    pub fn parse(text: &str, path: &str) -> Result<Names, NamesError> {
        let mut names = Names::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = || NamesError::BadLine {
                path: path.to_owned(),
                line: i + 1,
                text: raw.trim().to_owned(),
            };
            let mut parts = line.split_whitespace();
            let (Some(addr), Some(name)) = (parts.next(), parts.next()) else {
                return Err(bad());
            };
            if let Some(role) = parts.next() {
                names.roles.insert(name.to_owned(), role.to_owned());
            }
            if let Ok(e) = addr.parse::<Endpoint>() {
                names.by_endpoint.insert(e, name.into());
            } else if let Ok(ip) = addr.parse::<IpAddr>() {
                names.by_ip.insert(ip, name.into());
            } else {
                return Err(bad());
            }
        }
        Ok(names)
    }

    /// Adds an entry for an IP.
    pub fn insert_ip(&mut self, ip: IpAddr, name: &str) {
        self.by_ip.insert(ip, name.into());
    }

    /// The name given for `endpoint`, if any.
    pub fn lookup(&self, endpoint: &Endpoint) -> Option<&str> {
        self.by_endpoint
            .get(endpoint)
            .or_else(|| self.by_ip.get(&endpoint.ip))
            .map(|n| &**n)
    }

    /// The node an endpoint belongs to: its name, or its IP.
    pub fn node_of_endpoint(&self, endpoint: &Endpoint) -> NodeName {
        match self
            .by_endpoint
            .get(endpoint)
            .or_else(|| self.by_ip.get(&endpoint.ip))
        {
            Some(n) => Arc::clone(n),
            None => endpoint.ip.to_string().into(),
        }
    }

    /// The node an address belongs to.
    pub fn node_of(&self, address: &Address) -> NodeName {
        match address {
            Address::Endpoint(e) => self.node_of_endpoint(e),
            Address::Name(n) => n.as_str().into(),
        }
    }

    /// A node's role, for `--aggregate roles`: the third column of its names-file line; for a
    /// process node (`program[pid]@host`), its program; else its name without trailing digits
    /// and separators (`ws1` and `ws2` are both `ws`).
    pub fn role<'a>(&'a self, node: &'a str) -> &'a str {
        if let Some(r) = self.roles.get(node) {
            return r;
        }
        if let Some((program, rest)) = node.split_once('[') {
            if rest
                .split_once("]@")
                .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            {
                return program;
            }
        }
        let stripped = node.trim_end_matches(|c: char| c.is_ascii_digit());
        let stripped = stripped.trim_end_matches(['-', '_', '.']);
        if stripped.is_empty() || node.parse::<IpAddr>().is_ok() {
            node
        } else {
            stripped
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.by_endpoint.len() + self.by_ip.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_of_replicas_and_processes() {
        let n = Names::parse("10.0.0.9 cache7 memcache\n", "names").unwrap();
        assert_eq!(n.role("cache7"), "memcache");
        assert_eq!(n.role("ws12"), "ws");
        assert_eq!(n.role("app-3"), "app");
        assert_eq!(n.role("nginx[4242]@web1"), "nginx");
        assert_eq!(n.role("python3[17]@app.example"), "python3");
        assert_eq!(n.role("odd[x]@h"), "odd[x]@h");
        assert_eq!(n.role("10.0.0.3"), "10.0.0.3");
    }

    #[test]
    fn port_entries_win_and_bad_lines_are_located() {
        let n = Names::parse(
            "# hosts\n10.0.0.1 web1\n10.0.0.1:9000 web1-admin  # alt\n\n[::1]:80 local\n",
            "names",
        )
        .unwrap();
        assert_eq!(
            &*n.node_of_endpoint(&"10.0.0.1:80".parse().unwrap()),
            "web1"
        );
        assert_eq!(
            &*n.node_of_endpoint(&"10.0.0.1:9000".parse().unwrap()),
            "web1-admin"
        );
        assert_eq!(&*n.node_of_endpoint(&"[::1]:80".parse().unwrap()), "local");
        let mut cache = NodeCache::default();
        for _ in 0..2 {
            assert_eq!(
                &*cache.node_of_endpoint(&n, &"10.0.0.7:80".parse().unwrap()),
                "10.0.0.7"
            );
            assert_eq!(&*cache.node_of(&n, &Address::Name("db".into())), "db");
        }
        assert_eq!(&*n.node_of(&Address::Name("db".into())), "db");
        let err = Names::parse("10.0.0.1 a\nnot-an-ip b\n", "f.txt")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("f.txt:2:"), "{err}");
        assert!(Names::parse("10.0.0.1\n", "f").is_err());
    }
}
