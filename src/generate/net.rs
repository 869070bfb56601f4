//! Messages to packets: TCP connections (handshake, segments, delayed ACKs, FIN) and UDP
//! datagrams, with the endpoints each message used.
//!
//! Calls to a TCP service take an idle connection from the caller's pool for that server and
//! port, or open one; a connection carries one outstanding call at a time (HTTP/1.1 style) and
//! is busy until the return has arrived and been acknowledged. Clients open a connection per
//! instance and close it after the answer (`per-request`), or keep one per server
//! (`persistent`). Receivers acknowledge every second segment at once and the rest after the
//! delayed-ACK timeout, unless data or a FIN in the other direction carries the ACK first.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::config::{System, Transport};
use super::sim::{Host, Instance, SEGMENT_GAP_NS};

/// TCP flag bits.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// One packet on one hop of the wire, before sniffers write it. A packet through a DNAT load
/// balancer is two hops with the same id (hence the same payload and IP id): caller to load
/// balancer, and load balancer to server (or the reverse for answers).
#[derive(Clone, Debug)]
pub struct PacketDesc {
    /// When it leaves this hop's sender (true time, ns).
    pub leave_ns: f64,
    /// When it reaches this hop's receiver.
    pub arrive_ns: f64,
    /// This hop's sender.
    pub from: Host,
    /// This hop's receiver.
    pub to: Host,
    /// Source address and port, as on this hop.
    pub src: SocketAddrV4,
    /// Destination address and port, as on this hop.
    pub dst: SocketAddrV4,
    /// TCP or UDP.
    pub transport: Transport,
    /// TCP sequence number.
    pub seq: u32,
    /// TCP acknowledgment number.
    pub ack: u32,
    /// TCP flags.
    pub flags: u8,
    /// Payload length.
    pub payload_len: u32,
    /// IP TTL on this hop (one less after the load balancer).
    pub ttl: u8,
    /// Unique packet number (makes payloads distinct); the same on both hops.
    pub id: u64,
    /// The generated message whose data it carries (`None` for handshakes, ACKs and FINs).
    pub message: Option<u64>,
    /// Whether `from` is the packet's original sender (not the load balancer).
    pub first_hop: bool,
    /// Whether `to` is the packet's final receiver.
    pub last_hop: bool,
}

/// How one packet travels: between the two ends of a connection as each end addresses the
/// other, and, for a translated connection, through the load balancer.
#[derive(Clone, Copy, Debug)]
struct Route {
    from: (Host, SocketAddrV4),
    to: (Host, SocketAddrV4),
    /// The load balancer and the virtual address that stands for the server on the caller's
    /// side; `server_sends` tells which way the packet goes.
    via: Option<(Host, SocketAddrV4)>,
    server_sends: bool,
}

struct Conn {
    /// (host, address) of the side that opened it, and of the server (its own address).
    ends: [(Host, SocketAddrV4); 2],
    /// The load balancer and virtual address, for a translated connection.
    via: Option<(Host, SocketAddrV4)>,
    /// Next sequence number per direction: 0 is client to server.
    seq: [u32; 2],
    busy_until: f64,
    latency_ns: f64,
    last_activity: f64,
}

impl Conn {
    fn route(&self, dir: usize) -> Route {
        Route {
            from: self.ends[dir],
            to: self.ends[1 - dir],
            via: self.via,
            server_sends: dir == 1,
        }
    }
}

/// Endpoints of one message.
pub type Endpoints = (SocketAddrV4, SocketAddrV4);

/// How a call was carried, for its return.
#[derive(Clone, Copy)]
enum Carrier {
    Tcp(usize),
    Udp(SocketAddrV4, SocketAddrV4),
}

/// Turns instances into packets.
pub struct Network<'a> {
    system: &'a System,
    rng: Xoshiro256PlusPlus,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    pools: HashMap<(Host, u32, u16), Vec<usize>>,
    next_port: HashMap<Host, u16>,
    next_packet: u64,
    ack_delay_ns: f64,
    mss: u32,
    /// Packets produced so far and not yet taken.
    pub out: Vec<PacketDesc>,
    /// Translations used so far: (virtual endpoint, server endpoint).
    pub translations: std::collections::BTreeSet<(SocketAddrV4, SocketAddrV4)>,
}

/// Address of a client loop's host.
pub fn client_ip(client: u32) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        1 + (client / 62_500) as u8,
        ((client / 250) % 250) as u8,
        (client % 250 + 1) as u8,
    )
}

impl<'a> Network<'a> {
    /// A network for `system`.
    pub fn new(system: &'a System, seed: u64) -> Self {
        Network {
            system,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x006e_6574_776f_726b),
            conns: Vec::new(),
            free: Vec::new(),
            pools: HashMap::new(),
            next_port: HashMap::new(),
            next_packet: 0,
            ack_delay_ns: system.config.ack_delay_ms * 1e6,
            mss: system.config.mss.max(1),
            out: Vec::new(),
            translations: Default::default(),
        }
    }

    /// Address of a host.
    pub fn ip(&self, h: Host) -> Ipv4Addr {
        match h {
            Host::Server(i) => self.system.nodes[i as usize].ip,
            Host::Client(c) => client_ip(c),
        }
    }

    fn ephemeral(&mut self, h: Host) -> u16 {
        let start = self.rng.random_range(32_768..61_000u16);
        let p = self.next_port.entry(h).or_insert(start);
        let port = *p;
        *p = if *p >= 60_999 { 32_768 } else { *p + 1 };
        port
    }

    fn packet_id(&mut self) -> u64 {
        self.next_packet += 1;
        self.next_packet
    }

    /// Puts one packet on the wire: one hop, or two through a load balancer, taking
    /// `latency` in all (the load balancer forwards in a quarter of it, at most 20 µs).
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        route: Route,
        leave: f64,
        latency: f64,
        transport: Transport,
        (seq, ack, flags): (u32, u32, u8),
        len: u32,
        message: Option<u64>,
    ) {
        let id = self.packet_id();
        let packet =
            |from: (Host, SocketAddrV4), to: (Host, SocketAddrV4), leave: f64, arrive| PacketDesc {
                leave_ns: leave,
                arrive_ns: arrive,
                from: from.0,
                to: to.0,
                src: from.1,
                dst: to.1,
                transport,
                seq,
                ack,
                flags,
                payload_len: len,
                ttl: 64,
                id,
                message,
                first_hop: true,
                last_hop: true,
            };
        match route.via {
            None => self
                .out
                .push(packet(route.from, route.to, leave, leave + latency)),
            Some((lb, public)) => {
                let forward = (latency / 4.0).min(20_000.0);
                let hop = (latency - forward) / 2.0;
                // The caller's side uses the virtual address; the server's side the server's.
                let (first_dst, second_src) = if route.server_sends {
                    (route.to.1, public)
                } else {
                    (public, route.from.1)
                };
                let mut first = packet(route.from, (lb, first_dst), leave, leave + hop);
                first.last_hop = false;
                let mut second = packet(
                    (lb, second_src),
                    route.to,
                    leave + hop + forward,
                    leave + latency,
                );
                second.first_hop = false;
                second.ttl = 63;
                self.out.push(first);
                self.out.push(second);
            }
        }
    }

    /// Opens a connection from `caller` to `server:port` (through the load balancer when the
    /// server's role is translated): SYN, SYN-ACK and ACK, done just before `first_send`.
    fn open(
        &mut self,
        caller: Host,
        server: Host,
        port: u16,
        first_send: f64,
        latency: f64,
    ) -> usize {
        let cport = self.ephemeral(caller);
        let ends = [
            (caller, SocketAddrV4::new(self.ip(caller), cport)),
            (server, SocketAddrV4::new(self.ip(server), port)),
        ];
        let via = self.translated(server).map(|(lb, vip)| {
            let public = SocketAddrV4::new(vip, port);
            self.translations.insert((public, ends[1].1));
            (lb, public)
        });
        let isn = [self.rng.random::<u32>(), self.rng.random::<u32>()];
        let conn = Conn {
            ends,
            via,
            seq: [isn[0].wrapping_add(1), isn[1].wrapping_add(1)],
            busy_until: first_send,
            latency_ns: latency,
            last_activity: first_send,
        };
        let (out, back) = (conn.route(0), conn.route(1));
        let t0 = first_send - 2.0 * latency - 50_000.0;
        let seq = conn.seq;
        self.emit(
            out,
            t0,
            latency,
            Transport::Tcp,
            (isn[0], 0, flags::SYN),
            0,
            None,
        );
        self.emit(
            back,
            t0 + latency + 10_000.0,
            latency,
            Transport::Tcp,
            (isn[1], seq[0], flags::SYN | flags::ACK),
            0,
            None,
        );
        self.emit(
            out,
            t0 + 2.0 * latency + 20_000.0,
            latency,
            Transport::Tcp,
            (seq[0], seq[1], flags::ACK),
            0,
            None,
        );
        match self.free.pop() {
            Some(id) => {
                self.conns[id] = Some(conn);
                id
            }
            None => {
                self.conns.push(Some(conn));
                self.conns.len() - 1
            }
        }
    }

    /// The load balancer and virtual address in front of `server`, if its role is translated.
    fn translated(&self, server: Host) -> Option<(Host, Ipv4Addr)> {
        let dnat = self.system.dnat.as_ref()?;
        match server {
            Host::Server(n) if self.system.nodes[n as usize].role == dnat.role => {
                Some((Host::Server(dnat.lb as u32), dnat.vip))
            }
            _ => None,
        }
    }

    /// Closes a connection at `at`: FIN from the opener, FIN back, final ACK.
    fn close(&mut self, id: usize, at: f64) {
        let Some(c) = self.conns.get_mut(id).and_then(Option::take) else {
            return;
        };
        self.free.push(id);
        let (out, back) = (c.route(0), c.route(1));
        let l = c.latency_ns;
        let seq = c.seq;
        self.emit(
            out,
            at,
            l,
            Transport::Tcp,
            (seq[0], seq[1], flags::FIN | flags::ACK),
            0,
            None,
        );
        self.emit(
            back,
            at + l + 10_000.0,
            l,
            Transport::Tcp,
            (seq[1], seq[0].wrapping_add(1), flags::FIN | flags::ACK),
            0,
            None,
        );
        self.emit(
            out,
            at + 2.0 * l + 20_000.0,
            l,
            Transport::Tcp,
            (seq[0].wrapping_add(1), seq[1].wrapping_add(1), flags::ACK),
            0,
            None,
        );
    }

    /// Sends message `message` of `bytes` on connection `id` in direction `dir` (0: opener
    /// to server). The last odd segment is acknowledged after the delayed-ACK timeout unless
    /// the receiver sends something at `reply_at` before then. Returns when the last ACK
    /// arrives (or `None`).
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        id: usize,
        dir: usize,
        send: f64,
        latency: f64,
        bytes: u32,
        reply_at: Option<f64>,
        message: u64,
    ) -> Option<f64> {
        let (forward, backward, mut seq) = match &self.conns[id] {
            Some(c) => (c.route(dir), c.route(1 - dir), c.seq),
            None => return None,
        };
        let segments = bytes.div_ceil(self.mss).max(1);
        let mut left = bytes;
        let mut last_ack = None;
        for k in 0..segments {
            let len = left.min(self.mss);
            left -= len;
            let leave = send + k as f64 * SEGMENT_GAP_NS;
            let flag = if k + 1 == segments {
                flags::PSH | flags::ACK
            } else {
                flags::ACK
            };
            self.emit(
                forward,
                leave,
                latency,
                Transport::Tcp,
                (seq[dir], seq[1 - dir], flag),
                len,
                Some(message),
            );
            seq[dir] = seq[dir].wrapping_add(len);
            let arrive = leave + latency;
            let ack_at = if (k + 1) % 2 == 0 {
                Some(arrive + 10_000.0)
            } else if k + 1 == segments {
                let delayed = arrive + self.ack_delay_ns;
                match reply_at {
                    Some(r) if r < delayed => None,
                    _ => Some(delayed),
                }
            } else {
                None
            };
            if let Some(t) = ack_at {
                self.emit(
                    backward,
                    t,
                    latency,
                    Transport::Tcp,
                    (seq[1 - dir], seq[dir], flags::ACK),
                    0,
                    None,
                );
                last_ack = Some(t + latency);
            }
        }
        if let Some(c) = self.conns[id].as_mut() {
            c.seq = seq;
            c.last_activity = c.last_activity.max(send);
        }
        last_ack
    }

    /// An idle pooled connection from `caller` to `server:port` free at `at`, or a new one.
    fn pooled(&mut self, caller: Host, server: Host, port: u16, at: f64, latency: f64) -> usize {
        let node = match server {
            Host::Server(n) => n,
            Host::Client(c) => c,
        };
        let key = (caller, node, port);
        if let Some(list) = self.pools.get(&key) {
            for &id in list {
                if let Some(c) = &self.conns[id] {
                    if c.busy_until <= at {
                        return id;
                    }
                }
            }
        }
        let id = self.open(caller, server, port, at, latency);
        self.pools.entry(key).or_default().push(id);
        id
    }

    /// Produces the packets of `instance` into `out` and returns each message's endpoints.
    pub fn carry(&mut self, instance: &Instance) -> Vec<Endpoints> {
        let n = instance.messages.len();
        let mut carriers: Vec<Option<Carrier>> = vec![None; n];
        let mut endpoints: Vec<Endpoints> = Vec::with_capacity(n);
        let mut per_request: Vec<usize> = Vec::new();
        for (i, m) in instance.messages.iter().enumerate() {
            let reply = instance.messages.iter().find(|r| r.answers == Some(i));
            match m.answers {
                Some(call) => match carriers[call] {
                    Some(Carrier::Tcp(id)) => {
                        // A client's per-request connection closes right after the answer: the
                        // FIN carries the ACK.
                        let closes = per_request.contains(&id).then_some(m.recv_ns + 100_000.0);
                        let last_ack =
                            self.send(id, 1, m.send_ns, m.latency_ns, m.bytes, closes, m.id);
                        if let Some(c) = self.conns[id].as_mut() {
                            c.busy_until = c.busy_until.max(m.recv_ns).max(last_ack.unwrap_or(0.0));
                        }
                        let ends = self.conns[id].as_ref().map(|c| (c.ends[1].1, c.ends[0].1));
                        endpoints.push(ends.unwrap_or_else(|| {
                            (
                                SocketAddrV4::new(self.ip(m.from), 0),
                                SocketAddrV4::new(self.ip(m.to), 0),
                            )
                        }));
                        carriers[i] = Some(Carrier::Tcp(id));
                    }
                    Some(Carrier::Udp(a, b)) => {
                        let route = Route {
                            from: (m.from, b),
                            to: (m.to, a),
                            via: None,
                            server_sends: true,
                        };
                        self.emit(
                            route,
                            m.send_ns,
                            m.latency_ns,
                            Transport::Udp,
                            (0, 0, 0),
                            m.bytes.min(1400),
                            Some(m.id),
                        );
                        endpoints.push((b, a));
                    }
                    None => {
                        endpoints.push((
                            SocketAddrV4::new(self.ip(m.from), 0),
                            SocketAddrV4::new(self.ip(m.to), 0),
                        ));
                    }
                },
                None => {
                    let role = match m.to {
                        Host::Server(s) => self.system.nodes[s as usize].role.clone(),
                        Host::Client(_) => String::new(),
                    };
                    let Some(&(port, transport)) = self.system.services.get(&role) else {
                        endpoints.push((
                            SocketAddrV4::new(self.ip(m.from), 0),
                            SocketAddrV4::new(self.ip(m.to), 0),
                        ));
                        continue;
                    };
                    match transport {
                        Transport::Udp => {
                            let a = SocketAddrV4::new(self.ip(m.from), self.ephemeral(m.from));
                            let b = SocketAddrV4::new(self.ip(m.to), port);
                            let route = Route {
                                from: (m.from, a),
                                to: (m.to, b),
                                via: None,
                                server_sends: false,
                            };
                            self.emit(
                                route,
                                m.send_ns,
                                m.latency_ns,
                                Transport::Udp,
                                (0, 0, 0),
                                m.bytes.min(1400),
                                Some(m.id),
                            );
                            carriers[i] = Some(Carrier::Udp(a, b));
                            endpoints.push((a, b));
                        }
                        Transport::Tcp => {
                            let client_call = matches!(m.from, Host::Client(_));
                            let id = if client_call && !self.system.persistent_clients {
                                let id = self.open(m.from, m.to, port, m.send_ns, m.latency_ns);
                                per_request.push(id);
                                id
                            } else {
                                self.pooled(m.from, m.to, port, m.send_ns, m.latency_ns)
                            };
                            let reply_at = reply.map(|r| r.send_ns);
                            let last_ack =
                                self.send(id, 0, m.send_ns, m.latency_ns, m.bytes, reply_at, m.id);
                            if let Some(c) = self.conns[id].as_mut() {
                                let free = reply.map_or(m.recv_ns, |r| r.recv_ns);
                                c.busy_until = c.busy_until.max(free).max(last_ack.unwrap_or(0.0));
                            }
                            let ends = self.conns[id].as_ref().map(|c| (c.ends[0].1, c.ends[1].1));
                            endpoints.push(ends.unwrap_or_else(|| {
                                (
                                    SocketAddrV4::new(self.ip(m.from), 0),
                                    SocketAddrV4::new(self.ip(m.to), port),
                                )
                            }));
                            carriers[i] = Some(Carrier::Tcp(id));
                        }
                    }
                }
            }
        }
        // Per-request client connections close once the client has its last byte.
        for id in per_request {
            let done = instance
                .messages
                .iter()
                .zip(carriers.iter())
                .filter(|(_, c)| matches!(c, Some(Carrier::Tcp(x)) if *x == id))
                .map(|(m, _)| m.recv_ns)
                .fold(0.0, f64::max);
            self.close(id, done + 100_000.0);
        }
        endpoints
    }

    /// Closes every connection still open, at `at`.
    pub fn close_all(&mut self, at: f64) {
        for id in 0..self.conns.len() {
            if self.conns[id].is_some() {
                self.close(id, at);
            }
        }
        self.pools.clear();
    }

    /// Closes pooled connections idle since before `before` (they would time out in a real
    /// system too), so that long runs keep a bounded connection table.
    pub fn close_idle(&mut self, before: f64, idle_ns: f64) {
        let mut closing = Vec::new();
        for list in self.pools.values() {
            for &id in list {
                if let Some(c) = &self.conns[id] {
                    if c.busy_until + idle_ns < before && c.last_activity + idle_ns < before {
                        closing.push(id);
                    }
                }
            }
        }
        // In connection order, not the pool table's (random) order: the same seed gives the
        // same packets.
        closing.sort_unstable();
        for id in closing {
            self.close(id, before);
            for list in self.pools.values_mut() {
                list.retain(|x| *x != id);
            }
        }
        self.pools.retain(|_, l| !l.is_empty());
    }
}
