//! Where sniffers sit: which sniffer is nearest each host (WAP5 §7: "the sniffer on the
//! node's switch, else the one holding most of its packets").
//!
//! A *host sniffer* captures on a host: one address (or a few, for a multihomed host) takes
//! part in nearly every packet it sees; it is the home of those addresses. When the host talks
//! to one peer only, both ends take part in every packet; the host's own address is then the
//! one that sends with an initial TTL (64, 128, ...) where the peer's arrives decremented. A *segment
//! sniffer* (a mirror port) sees many hosts' traffic with none dominating; it is the home of
//! every address that has no host sniffer. A *transit* sniffer sees packets twice, on both
//! sides of a forwarding hop (a load balancer, a router): it is nobody's home.
//!
//! [`Homes::infer`] works from a sample of each origin's packets; users can state a host
//! sniffer's addresses instead (`--sniffer NAME=IP,...`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use causeway_sources::{OriginId, Packet};

/// How a sniffer relates to the hosts it sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On a host: the home of these addresses.
    Host(BTreeSet<IpAddr>),
    /// On a shared segment: the home of every address without a host sniffer.
    Segment,
    /// On a forwarding hop: nobody's home.
    Transit,
}

/// Which sniffer is nearest each address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Homes {
    placements: BTreeMap<OriginId, Placement>,
    hosts: HashMap<IpAddr, Vec<OriginId>>,
}

/// A packet's share of a sniffer's sample above which its address counts as the sniffer's own.
const DOMINANT: f64 = 0.9;

impl Homes {
    /// No sniffer placement known: every sniffer is treated as a segment sniffer.
    pub fn none() -> Self {
        Self::default()
    }

    /// Infers placements from a sample of packets per origin. `declared` gives host
    /// sniffers' addresses stated by the user; they win over inference.
    pub fn infer(
        samples: &BTreeMap<OriginId, Vec<Packet>>,
        declared: &BTreeMap<OriginId, BTreeSet<IpAddr>>,
    ) -> Homes {
        let mut homes = Homes::default();
        for (origin, packets) in samples {
            let placement = match declared.get(origin) {
                Some(ips) => Placement::Host(ips.clone()),
                None => infer_one(packets),
            };
            homes.set(*origin, placement);
        }
        for (origin, ips) in declared {
            if !samples.contains_key(origin) {
                homes.set(*origin, Placement::Host(ips.clone()));
            }
        }
        homes
    }

    /// Sets one sniffer's placement.
    pub fn set(&mut self, origin: OriginId, placement: Placement) {
        for list in self.hosts.values_mut() {
            list.retain(|o| *o != origin);
        }
        if let Placement::Host(ips) = &placement {
            for ip in ips {
                self.hosts.entry(*ip).or_default().push(origin);
            }
        }
        self.placements.insert(origin, placement);
    }

    /// A sniffer's placement (segment, when unknown).
    pub fn placement(&self, origin: OriginId) -> &Placement {
        self.placements.get(&origin).unwrap_or(&Placement::Segment)
    }

    /// The host sniffers of `ip`.
    pub fn host_sniffers(&self, ip: &IpAddr) -> &[OriginId] {
        self.hosts.get(ip).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether `origin` is a home of `ip`: one of its host sniffers, or, for an address
    /// without a host sniffer, a segment sniffer.
    pub fn is_home(&self, origin: OriginId, ip: &IpAddr) -> bool {
        match self.hosts.get(ip) {
            Some(list) if !list.is_empty() => list.contains(&origin),
            _ => matches!(self.placement(origin), Placement::Segment),
        }
    }

    /// Placements by origin.
    pub fn placements(&self) -> impl Iterator<Item = (&OriginId, &Placement)> {
        self.placements.iter()
    }
}

fn infer_one(packets: &[Packet]) -> Placement {
    if packets.is_empty() {
        return Placement::Segment;
    }
    // The same content seen twice with different addresses: both sides of a forwarding hop.
    let mut contents: HashMap<(u64, u32, u32), (std::net::SocketAddr, std::net::SocketAddr)> =
        HashMap::new();
    let mut forwarded = 0usize;
    let mut with_content = 0usize;
    for p in packets
        .iter()
        .filter(|p| p.payload_len > 0 && p.payload_hash != 0)
    {
        with_content += 1;
        let key = (p.payload_hash, p.payload_len, p.tcp.map_or(0, |t| t.seq));
        let view = ((p.src.ip, p.src.port).into(), (p.dst.ip, p.dst.port).into());
        match contents.get(&key) {
            Some(seen) if *seen != view => forwarded += 1,
            Some(_) => {}
            None => {
                contents.insert(key, view);
            }
        }
    }
    if with_content > 20 && forwarded * 4 > with_content {
        return Placement::Transit;
    }
    let mut count: HashMap<IpAddr, usize> = HashMap::new();
    for p in packets {
        let mut seen = HashSet::with_capacity(2);
        for ip in [p.src.ip, p.dst.ip] {
            if seen.insert(ip) {
                *count.entry(ip).or_default() += 1;
            }
        }
    }
    let n = packets.len() as f64;
    let mut own: BTreeSet<IpAddr> = count
        .into_iter()
        .filter(|(_, c)| *c as f64 >= DOMINANT * n)
        .map(|(ip, _)| ip)
        .collect();
    if own.len() > 1 {
        // A sniffer that sees one peer only (or a virtual address) finds both ends in every
        // packet. Its own host sends with an initial TTL; a peer behind a router or load
        // balancer arrives with one less.
        let mut ttl: HashMap<IpAddr, u8> = HashMap::new();
        for p in packets {
            let t = ttl.entry(p.src.ip).or_default();
            *t = (*t).max(p.ttl);
        }
        let initial = |ip: &IpAddr| ttl.get(ip).is_some_and(|t| INITIAL_TTLS.contains(t));
        if own.iter().any(initial) && !own.iter().all(initial) {
            own.retain(initial);
        }
    }
    if own.is_empty() {
        Placement::Segment
    } else {
        Placement::Host(own)
    }
}

/// The TTLs (hop limits) that operating systems send with.
const INITIAL_TTLS: [u8; 4] = [32, 64, 128, 255];

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_sources::{Endpoint, Protocol};

    fn packet(src: &str, dst: &str, hash: u64) -> Packet {
        Packet {
            ts_ns: 0,
            origin: OriginId(0),
            src: src.parse::<Endpoint>().unwrap(),
            dst: dst.parse::<Endpoint>().unwrap(),
            protocol: Protocol::Udp,
            ttl: 64,
            ip_id: 0,
            tcp: None,
            payload_len: 10,
            payload_hash: hash,
            payload_truncated: false,
            wire_len: 60,
        }
    }

    #[test]
    fn host_segment_and_transit_sniffers() {
        let host: Vec<Packet> = (0..50)
            .map(|i| packet("10.0.0.1:80", &format!("10.1.0.{}:4000", i % 7), i))
            .collect();
        let segment: Vec<Packet> = (0..50)
            .map(|i| {
                packet(
                    &format!("10.0.0.{}:80", i % 5),
                    &format!("10.1.0.{}:4000", i % 7),
                    i,
                )
            })
            .collect();
        let mut transit = Vec::new();
        for i in 0..50 {
            transit.push(packet(
                &format!("10.2.0.{}:4000", i % 3),
                "10.9.9.9:80",
                1000 + i,
            ));
            transit.push(packet(
                &format!("10.2.0.{}:4000", i % 3),
                "10.0.0.1:80",
                1000 + i,
            ));
        }
        let samples = BTreeMap::from([
            (OriginId(0), host),
            (OriginId(1), segment),
            (OriginId(2), transit),
        ]);
        let homes = Homes::infer(&samples, &BTreeMap::new());
        let web: IpAddr = "10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.3".parse().unwrap();
        assert_eq!(
            homes.placement(OriginId(0)),
            &Placement::Host(BTreeSet::from([web]))
        );
        assert_eq!(homes.placement(OriginId(1)), &Placement::Segment);
        assert_eq!(homes.placement(OriginId(2)), &Placement::Transit);
        assert!(homes.is_home(OriginId(0), &web));
        assert!(!homes.is_home(OriginId(1), &web), "the host sniffer wins");
        assert!(homes.is_home(OriginId(1), &other));
        assert!(!homes.is_home(OriginId(2), &other));
    }

    #[test]
    fn a_host_that_talks_to_one_peer_through_a_router_is_told_by_ttl() {
        let mut sample = Vec::new();
        for i in 0..20 {
            sample.push(packet("10.0.2.2:8080", "10.0.1.2:40000", i));
            let mut back = packet("10.0.1.2:40000", "10.0.2.2:8080", 100 + i);
            back.ttl = 63;
            sample.push(back);
        }
        let homes = Homes::infer(&BTreeMap::from([(OriginId(0), sample)]), &BTreeMap::new());
        assert_eq!(
            homes.placement(OriginId(0)),
            &Placement::Host(BTreeSet::from(["10.0.2.2".parse().unwrap()]))
        );
    }
}
