//! Fixed and ephemeral ports, servers and clients (WAP5 §2.5.1).
//!
//! A port is *fixed* when its endpoint talks to many peer endpoints (a DNS server's 53 talks to
//! thousands of source ports); a node is a *server* if it uses a fixed port at least once, and
//! a *client* otherwise. Client nodes are aggregated to `CLIENT` and ephemeral ports to `*`, so
//! that trees from different clients and source ports aggregate into one pattern.
//!
//! [`Ports`] learns this from the messages it is shown: an endpoint is fixed once it has been
//! seen with [`FIXED_PEERS`] distinct peer endpoints. Until both endpoints of a message have
//! that much evidence (the first messages of a run), the endpoint whose peer has more peers is
//! ephemeral and, between two newcomers, a port below the ephemeral range (Linux and Windows
//! draw ephemeral ports from 32768 and up) is the fixed one; if both are in it or both below
//! it, the one that was spoken to first (a server bound to port 0), and last the lower port.
//!
//! Servers are nodes, not addresses: on one host (loopback, or socket-call logs naming
//! processes) a client process and a server process share an IP.
//!
//! An endpoint first seen speaking with a fixed one is the ephemeral end and is not recorded
//! (a busy server's clients would fill the table with an endpoint per connection); so an
//! endpoint that only ever speaks with fixed ports, such as a resolver's socket asking three
//! DNS servers, stays ephemeral.
//!
//! State: per endpoint not yet known to be ephemeral, up to [`FIXED_PEERS`] peers and the time it was last seen; per node
//! ([`crate::paths::link::node_key`]), whether it has a fixed endpoint. Endpoints not seen for `idle_ns` are forgotten
//! ([`Ports::expire`]), so the table follows the live endpoints, not the length of the run.

use std::collections::HashMap;

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use causeway_sources::{Address, Endpoint, Time};

/// How often (event time) the operators that keep a [`Ports`] run [`Ports::expire`]: a sweep
/// visits every endpoint held, and the table holds this much more than its idle time.
pub const EXPIRY_EVERY_NS: Time = 60_000_000_000;

/// Distinct peers that make an endpoint fixed.
pub const FIXED_PEERS: usize = 3;

#[derive(Clone, Debug, Default)]
struct Seen {
    /// The first [`FIXED_PEERS`] distinct peers, inline (no allocation per endpoint), as
    /// hashes ([`peer_key`]; 0 for none): a third of the table's bytes the endpoints
    /// themselves took.
    peers: [u64; FIXED_PEERS],
    last_ns: Time,
    /// Whether its first message (since it was last forgotten) came to it: the side that
    /// is spoken to first is the server's.
    first_dst: bool,
}

impl Seen {
    fn len(&self) -> usize {
        self.peers.iter().take_while(|p| **p != 0).count()
    }
}

/// A peer endpoint as [`Seen`] remembers it: a hash, never 0.
fn peer_key(e: &Endpoint) -> u64 {
    endpoint_key(e).max(1)
}

/// An endpoint's key in the table: an IPv4 endpoint's address and port themselves (exact, and
/// cheap to hash), an IPv6 endpoint's hash.
fn endpoint_key(e: &Endpoint) -> u64 {
    match e.ip {
        std::net::IpAddr::V4(ip) => {
            (1 << 48) | (u64::from(u32::from(ip)) << 16) | u64::from(e.port)
        }
        std::net::IpAddr::V6(_) => FixedState::with_seed(0x7065_6572).hash_one(e) | (1 << 63),
    }
}

/// What [`Ports::observe_message`] tells of a message's two ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    /// Whether the sender's endpoint is the fixed end ([`Ports::fixed`]).
    pub src_fixed: bool,
    /// Whether the receiver's endpoint is the fixed end.
    pub dst_fixed: bool,
    /// Whether the sender is a client ([`Ports::client`]).
    pub src_client: bool,
    /// Whether the receiver is a client.
    pub dst_client: bool,
}

/// Learns fixed ports and server nodes from messages.
#[derive(Clone, Debug)]
pub struct Ports {
    /// By [`endpoint_key`].
    endpoints: HashMap<u64, Seen, FixedState>,
    servers: HashMap<u64, Time, FixedState>,
    /// An endpoint unseen this long starts afresh when seen again (an ephemeral port reused
    /// by another connection): decided when it is seen, so that the classification does not
    /// depend on when [`Ports::expire`] ran.
    idle_ns: Time,
}

impl Default for Ports {
    fn default() -> Self {
        Ports::with_idle(300_000_000_000)
    }
}

impl Ports {
    /// A classifier that forgets endpoints unseen for `idle_ns`.
    pub fn with_idle(idle_ns: Time) -> Self {
        Ports {
            endpoints: HashMap::default(),
            servers: HashMap::default(),
            idle_ns,
        }
    }

    /// Records a message between `a` (of node `node_a`) and `b` (of `node_b`) at event time
    /// `t`.
    pub fn observe(&mut self, a: &Address, b: &Address, node_a: u64, node_b: u64, t: Time) {
        match (a, b) {
            (Address::Endpoint(a), Address::Endpoint(b)) => {
                self.note(*a, *b, node_a, t, false);
                self.note(*b, *a, node_b, t, true);
            }
            _ => {
                // A UNIX stream socket: the end with the path is the server's.
                for (x, node) in [(a, node_a), (b, node_b)] {
                    if unix_end(x) == Some(UnixEnd::Server) {
                        let s = self.servers.entry(node).or_default();
                        *s = (*s).max(t);
                    }
                }
            }
        }
    }

    /// [`Ports::observe`], then what [`Ports::fixed`] and [`Ports::client`] say of both
    /// ends: looking each endpoint up once.
    pub fn observe_message(
        &mut self,
        a: &Address,
        b: &Address,
        node_a: u64,
        node_b: u64,
        t: Time,
    ) -> Ends {
        match (a, b) {
            (Address::Endpoint(x), Address::Endpoint(y)) if x != y => {
                let ex = self.note(*x, *y, node_a, t, false);
                let ey = self.note(*y, *x, node_b, t, true);
                let (src_fixed, dst_fixed) = (fixed_rule(ex, ey), fixed_rule(ey, ex));
                Ends {
                    src_fixed,
                    dst_fixed,
                    src_client: !src_fixed && !self.servers.contains_key(&node_a),
                    dst_client: !dst_fixed && !self.servers.contains_key(&node_b),
                }
            }
            _ => {
                self.observe(a, b, node_a, node_b, t);
                let (src_fixed, dst_fixed) = self.fixed_ends(a, b);
                Ends {
                    src_fixed,
                    dst_fixed,
                    src_client: self.client_given(a, node_a, src_fixed),
                    dst_client: self.client_given(b, node_b, dst_fixed),
                }
            }
        }
    }

    /// Notes that `e` (of `node`) exchanged a message with `peer`; returns what the rule of
    /// fixed ports now knows of `e`.
    fn note(&mut self, e: Endpoint, peer: Endpoint, node: u64, t: Time, as_dst: bool) -> Evidence {
        let key = endpoint_key(&e);
        if !self.endpoints.contains_key(&key) && self.is_fixed_key(endpoint_key(&peer), t) {
            // A new endpoint speaking with a fixed one is the ephemeral end: the rule says so
            // with no record of it, and a busy server's clients would otherwise fill the
            // table with one endpoint per connection.
            return Evidence {
                peers: 0,
                port: e.port,
                first_dst: as_dst,
            };
        }
        let seen = self.endpoints.entry(key).or_insert_with(|| Seen {
            first_dst: as_dst,
            ..Seen::default()
        });
        if seen.last_ns.saturating_add(self.idle_ns) < t {
            *seen = Seen {
                first_dst: as_dst,
                ..Seen::default()
            };
        }
        seen.last_ns = seen.last_ns.max(t);
        let n = seen.len();
        if n < FIXED_PEERS {
            let peer = peer_key(&peer);
            if !seen.peers[..n].contains(&peer) {
                seen.peers[n] = peer;
            }
        }
        let evidence = Evidence {
            peers: seen.len(),
            port: e.port,
            first_dst: seen.first_dst,
        };
        if seen.peers[FIXED_PEERS - 1] != 0 {
            let s = self.servers.entry(node).or_default();
            *s = (*s).max(t);
        }
        evidence
    }

    /// Whether the endpoint with key `key` has [`FIXED_PEERS`] peers and is not idle at `t`.
    fn is_fixed_key(&self, key: u64, t: Time) -> bool {
        self.endpoints.get(&key).is_some_and(|s| {
            s.peers[FIXED_PEERS - 1] != 0 && s.last_ns.saturating_add(self.idle_ns) >= t
        })
    }

    /// What the rule of fixed ports knows of `e`.
    fn evidence(&self, e: &Endpoint) -> Evidence {
        let seen = self.endpoints.get(&endpoint_key(e));
        Evidence {
            peers: seen.map_or(0, Seen::len),
            port: e.port,
            first_dst: seen.is_some_and(|s| s.first_dst),
        }
    }

    /// Whether `e` is a fixed port, in a message with `peer`.
    pub fn fixed(&self, e: &Address, peer: &Address) -> bool {
        let (Address::Endpoint(e), Address::Endpoint(peer)) = (e, peer) else {
            // UNIX sockets and names: the named side is the fixed one; of a UNIX stream
            // socket's two ends (`unix:PATH` and `unix:PATH#PID`), the path's.
            return match e {
                Address::Name(_) => unix_end(e) != Some(UnixEnd::Client),
                Address::Endpoint(_) => false,
            };
        };
        fixed_rule(self.evidence(e), self.evidence(peer))
    }

    /// `(fixed(a, b), fixed(b, a))`, looking each endpoint up once.
    pub fn fixed_ends(&self, a: &Address, b: &Address) -> (bool, bool) {
        let (Address::Endpoint(x), Address::Endpoint(y)) = (a, b) else {
            return (self.fixed(a, b), self.fixed(b, a));
        };
        let (ex, ey) = (self.evidence(x), self.evidence(y));
        (fixed_rule(ex, ey), fixed_rule(ey, ex))
    }

    /// Whether `node`, at `e`, is a client: it has no fixed port, and `e` is not fixed in this
    /// message with `peer`.
    pub fn client(&self, e: &Address, peer: &Address, node: u64) -> bool {
        self.client_given(e, node, self.fixed(e, peer))
    }

    /// [`Ports::client`] when `fixed(e, peer)` is already known.
    pub fn client_given(&self, e: &Address, node: u64, fixed: bool) -> bool {
        match e {
            Address::Endpoint(_) => !fixed && !self.servers.contains_key(&node),
            // The connecting end of a UNIX stream socket (`unix:PATH#PID`).
            Address::Name(_) if unix_end(e) == Some(UnixEnd::Client) => {
                !self.servers.contains_key(&node)
            }
            Address::Name(_) => false,
        }
    }

    /// Forgets endpoints (and servers) not seen since `before`.
    pub fn expire(&mut self, before: Time) {
        self.endpoints.retain(|_, s| s.last_ns >= before);
        self.servers.retain(|_, t| *t >= before);
    }

    /// Endpoints held.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

/// The first port of the range Linux draws ephemeral ports from (Windows: 49152).
const EPHEMERAL_FROM: u16 = 32768;

/// What [`fixed_rule`] weighs of one endpoint.
#[derive(Clone, Copy, Debug)]
struct Evidence {
    /// Distinct peers seen, up to [`FIXED_PEERS`].
    peers: usize,
    port: u16,
    first_dst: bool,
}

/// Whether endpoint `mine` is the fixed end of a message with `theirs`: the one with
/// [`FIXED_PEERS`] peers is; else the one with more; else the one outside the ephemeral
/// range; else the one spoken to first (a server bound to an ephemeral port, as test servers
/// and many RPC services are); else the lower port.
fn fixed_rule(mine: Evidence, theirs: Evidence) -> bool {
    let ephemeral = |e: Evidence| e.port >= EPHEMERAL_FROM;
    if mine.peers >= FIXED_PEERS {
        true
    } else if theirs.peers >= FIXED_PEERS {
        false
    } else if mine.peers != theirs.peers {
        mine.peers > theirs.peers
    } else if ephemeral(mine) != ephemeral(theirs) {
        !ephemeral(mine)
    } else if mine.first_dst != theirs.first_dst {
        mine.first_dst
    } else {
        mine.port < theirs.port
    }
}

/// The two ends of a UNIX stream socket as the socket-log source names them.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UnixEnd {
    /// `unix:PATH`: the listening side.
    Server,
    /// `unix:PATH#PID`: the connecting side.
    Client,
}

/// Which end of a UNIX stream socket `a` is, if it is one.
fn unix_end(a: &Address) -> Option<UnixEnd> {
    match a {
        Address::Name(n) if n.starts_with("unix:") => Some(if n.contains('#') {
            UnixEnd::Client
        } else {
            UnixEnd::Server
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Address {
        Address::parse(s)
    }

    #[test]
    fn servers_have_fixed_ports_and_clients_do_not() {
        let mut p = Ports::default();
        // Before evidence: the lower port is the fixed one.
        assert!(p.fixed(&a("10.0.0.1:80"), &a("10.1.0.1:40000")));
        let (client, server) = (7, 9);
        assert!(p.client(&a("10.1.0.1:40000"), &a("10.0.0.1:80"), client));
        for port in [40000, 40001, 40002] {
            p.observe(
                &a(&format!("10.1.0.1:{port}")),
                &a("10.0.0.1:80"),
                client,
                server,
                1,
            );
        }
        // 10.0.0.1:80 has 3 peers: fixed, and its node a server, also when it calls out
        // from a high port to a lower one.
        assert!(p.fixed(&a("10.0.0.1:80"), &a("10.1.0.1:40000")));
        assert!(!p.fixed(&a("10.1.0.1:40000"), &a("10.0.0.1:80")));
        assert!(!p.client(&a("10.0.0.1:50000"), &a("10.0.0.9:5432"), server));
        assert!(p.client(&a("10.1.0.1:40000"), &a("10.0.0.1:80"), client));
        // A client process on the server's host is still a client.
        assert!(p.client(&a("10.0.0.1:40000"), &a("10.0.0.1:80"), client));
        // UNIX stream sockets: the end with the path is the server's.
        let (sock, conn) = (a("unix:/run/app.sock"), a("unix:/run/app.sock#42"));
        p.observe(&conn, &sock, client, server, 1);
        assert!(p.fixed(&sock, &conn) && !p.fixed(&conn, &sock));
        assert!(p.client(&conn, &sock, client));
        assert!(!p.client(&sock, &conn, server));
        p.expire(2);
        assert!(p.is_empty());
    }

    proptest::proptest! {
        /// `observe_message` says what `observe` then `fixed` and `client` say.
        #[test]
        fn observe_message_is_observe_then_classify(
            msgs in proptest::collection::vec((0u8..4, 0u16..6, 0u8..4, 0u16..6, 0u64..3, 0u64..3), 1..60)
        ) {
            let (mut one, mut two) = (Ports::default(), Ports::default());
            for (t, (ha, pa, hb, pb, na, nb)) in msgs.into_iter().enumerate() {
                let ep = |h: u8, p: u16| a(&format!("10.0.0.{h}:{}", [80, 443, 5432, 33000, 40000, 50000][p as usize]));
                let (x, y) = (ep(ha, pa), ep(hb, pb));
                let ends = one.observe_message(&x, &y, na, nb, t as Time);
                two.observe(&x, &y, na, nb, t as Time);
                let expected = Ends {
                    src_fixed: two.fixed(&x, &y),
                    dst_fixed: two.fixed(&y, &x),
                    src_client: two.client(&x, &y, na),
                    dst_client: two.client(&y, &x, nb),
                };
                proptest::prop_assert_eq!(ends, expected);
            }
        }
    }

    #[test]
    fn clients_of_a_fixed_port_are_not_recorded() {
        let mut p = Ports::default();
        let server = a("10.0.0.1:80");
        for port in 40000..41000 {
            let client = a(&format!("10.1.0.1:{port}"));
            p.observe_message(&client, &server, 7, 9, 1);
            p.observe_message(&server, &client, 9, 7, 2);
            assert!(p.fixed(&server, &client) && !p.fixed(&client, &server));
            assert!(p.client(&client, &server, 7));
        }
        // The server and its first three clients, which made it fixed.
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn between_two_newcomers_in_the_ephemeral_range_the_one_spoken_to_first_is_fixed() {
        let mut p = Ports::default();
        // A server bound to port 0 got 45000; its first client's port is 38000.
        let (server, client) = (a("127.0.0.1:45000"), a("127.0.0.1:38000"));
        p.observe(&client, &server, 1, 2, 1);
        p.observe(&server, &client, 2, 1, 2);
        assert!(p.fixed(&server, &client) && !p.fixed(&client, &server));
        assert!(p.client(&client, &server, 1));
        // Outside the ephemeral range the low port wins, whoever spoke first (a capture
        // that starts with a response).
        let (web, browser) = (a("10.0.0.1:80"), a("10.1.0.1:50000"));
        p.observe(&web, &browser, 3, 4, 3);
        assert!(p.fixed(&web, &browser) && !p.fixed(&browser, &web));
    }
}
