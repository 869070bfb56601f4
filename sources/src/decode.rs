//! Frames to [`Packet`] observations: link layer, IP, TCP/UDP, on etherparse.
//!
//! Link types: Ethernet (with 802.1Q and QinQ tags), Linux cooked capture v1 (`SLL`) and v2
//! (`SLL2`, what `tcpdump -i any` writes), raw IP (`RAW`, `IPV4`, `IPV6` and the
//! platform-specific `DLT_RAW` numbers 12 and 14), BSD loopback (`NULL`, host byte order) and
//! OpenBSD loopback (`LOOP`, network byte order).
//!
//! Network: IPv4 and IPv6 with extension headers; fragments are counted, not reassembled.
//! Transport: TCP and UDP; other IP protocols are counted and skipped. Frames cut short by the
//! snap length still yield a packet as long as the transport header is whole: the payload
//! length comes from the IP and UDP headers, the payload hash covers the captured prefix.
//!
//! Parsing borrows the frame (etherparse's per-layer slices); only the fields a [`Packet`]
//! holds are copied out.

use std::net::IpAddr;

use etherparse::{
    EtherType, Ethernet2Slice, IpNumber, LaxIpSlice, SingleVlanSlice, TcpOptionElement, TcpSlice,
    UdpSlice,
};

use crate::observation::{Endpoint, Packet, Protocol, TcpFields, TcpFlags};
use crate::origin::OriginId;
use crate::pcap::Frame;
use crate::stats::SkipReason;

/// pcap LINKTYPE numbers this decoder understands.
pub mod linktype {
    /// BSD loopback: 4-byte address family in the capturing host's byte order.
    pub const NULL: u16 = 0;
    /// Ethernet II.
    pub const ETHERNET: u16 = 1;
    /// Raw IP on some BSDs.
    pub const RAW_BSD12: u16 = 12;
    /// Raw IP on some BSDs.
    pub const RAW_BSD14: u16 = 14;
    /// Raw IP.
    pub const RAW: u16 = 101;
    /// OpenBSD loopback: 4-byte address family in network byte order.
    pub const LOOP: u16 = 108;
    /// Linux cooked capture v1.
    pub const LINUX_SLL: u16 = 113;
    /// Raw IPv4.
    pub const IPV4: u16 = 228;
    /// Raw IPv6.
    pub const IPV6: u16 = 229;
    /// Linux cooked capture v2.
    pub const LINUX_SLL2: u16 = 276;

    /// A readable name for a link type.
    pub fn name(lt: u16) -> String {
        match lt {
            NULL => "NULL (BSD loopback)".into(),
            ETHERNET => "Ethernet".into(),
            RAW | RAW_BSD12 | RAW_BSD14 => "Raw IP".into(),
            LOOP => "LOOP (OpenBSD loopback)".into(),
            LINUX_SLL => "Linux cooked v1 (SLL)".into(),
            IPV4 => "Raw IPv4".into(),
            IPV6 => "Raw IPv6".into(),
            LINUX_SLL2 => "Linux cooked v2 (SLL2)".into(),
            other => format!("linktype {other}"),
        }
    }
}

/// What to compute while decoding.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    /// Hash payloads (needed to match copies across sniffers; `stats` does not need it).
    pub hash_payload: bool,
    /// What a node is in socket-call logs.
    pub node_granularity: NodeGranularity,
    /// Put a capture file's packets back in timestamp order within a few ms
    /// ([`crate::sorted`]): analysis needs it, counting (`stats`) does not.
    pub sort_packets: bool,
    /// Follow capture directories while their programs run
    /// ([`crate::socketlog::SocketLogReader::follow`]).
    pub follow_logs: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            hash_payload: true,
            node_granularity: NodeGranularity::Process,
            sort_packets: true,
            follow_logs: false,
        }
    }
}

/// What a node is, for inputs that know processes (socket-call logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeGranularity {
    /// Each process: `program[pid]@host`.
    #[default]
    Process,
    /// Each host: all its processes are one node.
    Host,
}

/// Whether a decoded packet was carried over IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// EtherTypes of VLAN tags: 802.1Q, 802.1ad (QinQ), and the pre-standard 0x9100.
const VLAN_TAGS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// Peels the link layer: returns the EtherType of the network layer and its bytes.
fn link_layer<'a>(frame: &Frame<'a>) -> Result<(u16, &'a [u8]), SkipReason> {
    let data = frame.data;
    Ok(match frame.linktype {
        linktype::ETHERNET => {
            let eth = Ethernet2Slice::from_slice_without_fcs(data)
                .map_err(|_| SkipReason::MalformedHeader)?;
            (eth.ether_type().0, eth.payload_slice())
        }
        linktype::LINUX_SLL => {
            let header = data.get(..16).ok_or(SkipReason::MalformedHeader)?;
            (u16::from_be_bytes([header[14], header[15]]), &data[16..])
        }
        linktype::LINUX_SLL2 => {
            let header = data.get(..20).ok_or(SkipReason::MalformedHeader)?;
            (u16::from_be_bytes([header[0], header[1]]), &data[20..])
        }
        linktype::NULL | linktype::LOOP => {
            let family = data.get(..4).ok_or(SkipReason::MalformedHeader)?;
            let family = [family[0], family[1], family[2], family[3]];
            let values = if frame.linktype == linktype::LOOP {
                [u32::from_be_bytes(family), u32::from_be_bytes(family)]
            } else {
                // The capturing host's byte order is not recorded: accept either.
                [u32::from_le_bytes(family), u32::from_be_bytes(family)]
            };
            let ether_type = if values.contains(&2) {
                EtherType::IPV4
            } else if values.iter().any(|v| matches!(v, 10 | 24 | 28 | 30)) {
                EtherType::IPV6
            } else {
                return Err(SkipReason::NonIp);
            };
            (ether_type.0, &data[4..])
        }
        linktype::RAW
        | linktype::RAW_BSD12
        | linktype::RAW_BSD14
        | linktype::IPV4
        | linktype::IPV6 => match data.first().map(|b| b >> 4) {
            Some(4) => (EtherType::IPV4.0, data),
            Some(6) => (EtherType::IPV6.0, data),
            _ => return Err(SkipReason::MalformedHeader),
        },
        _ => return Err(SkipReason::UnsupportedLinktype),
    })
}

/// Decodes one frame. On success also says which IP version carried it.
///
/// Uses etherparse's per-layer slices (Ethernet, VLAN, lax IP, TCP, UDP) rather than its
/// whole-packet slicer, which copies a large intermediate struct per packet.
#[inline]
pub fn decode(
    frame: &Frame<'_>,
    origin: OriginId,
    options: DecodeOptions,
) -> Result<(Packet, IpVersion), SkipReason> {
    let (mut ether_type, mut rest) = link_layer(frame)?;
    // 802.1Q / QinQ tags, as many as there are (bounded by the frame).
    while VLAN_TAGS.contains(&ether_type) {
        let vlan = SingleVlanSlice::from_slice(rest).map_err(|_| SkipReason::MalformedHeader)?;
        ether_type = vlan.ether_type().0;
        rest = &rest[4..];
    }
    if ether_type != EtherType::IPV4.0 && ether_type != EtherType::IPV6.0 {
        return Err(SkipReason::NonIp);
    }
    let (ip, _ext_error) = LaxIpSlice::from_slice(rest).map_err(|_| SkipReason::MalformedHeader)?;
    let (src_ip, dst_ip, ttl, ip_id, version, ip_payload, declared_ip_payload): (
        IpAddr,
        IpAddr,
        _,
        _,
        _,
        _,
        _,
    ) = match &ip {
        LaxIpSlice::Ipv4(ip) => {
            let h = ip.header();
            let payload = ip.payload();
            let headers_len = payload.payload.as_ptr() as usize - h.slice().as_ptr() as usize;
            let total = h.total_len() as usize;
            let declared = if total > headers_len {
                total - headers_len
            } else {
                payload.payload.len()
            };
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                h.ttl(),
                h.identification(),
                IpVersion::V4,
                payload,
                declared,
            )
        }
        LaxIpSlice::Ipv6(ip) => {
            let h = ip.header();
            let payload = ip.payload();
            let ext_len = payload.payload.as_ptr() as usize - h.slice().as_ptr() as usize - 40;
            let declared = match h.payload_length() as usize {
                0 => payload.payload.len(),
                n if n >= ext_len => n - ext_len,
                _ => payload.payload.len(),
            };
            (
                h.source_addr().into(),
                h.destination_addr().into(),
                h.hop_limit(),
                0,
                IpVersion::V6,
                payload,
                declared,
            )
        }
    };
    if ip_payload.fragmented {
        return Err(SkipReason::IpFragment);
    }
    let (src_port, dst_port, protocol, tcp, payload, payload_len) = match ip_payload.ip_number {
        IpNumber::TCP => {
            let t = TcpSlice::from_slice(ip_payload.payload)
                .map_err(|_| SkipReason::MalformedHeader)?;
            let header_len = t.header_slice().len();
            let flags = TcpFlags(t.header_slice()[13]);
            let window_scale = if flags.has(TcpFlags::SYN) {
                t.options_iterator().find_map(|o| match o {
                    Ok(TcpOptionElement::WindowScale(s)) => Some(s),
                    _ => None,
                })
            } else {
                None
            };
            let fields = TcpFields {
                seq: t.sequence_number(),
                ack: t.acknowledgment_number(),
                flags,
                window: t.window_size(),
                window_scale,
            };
            let len = declared_ip_payload.saturating_sub(header_len);
            (
                t.source_port(),
                t.destination_port(),
                Protocol::Tcp,
                Some(fields),
                t.payload(),
                len,
            )
        }
        IpNumber::UDP => {
            let u = UdpSlice::from_slice_lax(ip_payload.payload)
                .map_err(|_| SkipReason::MalformedHeader)?;
            let declared = (u.length() as usize).saturating_sub(8);
            let len = if declared == 0 {
                u.payload().len()
            } else {
                declared
            };
            (
                u.source_port(),
                u.destination_port(),
                Protocol::Udp,
                None,
                u.payload(),
                len,
            )
        }
        _ => return Err(SkipReason::OtherProtocol),
    };
    let captured = payload.len().min(payload_len);
    let payload = &payload[..captured];
    let payload_hash = if options.hash_payload && !payload.is_empty() {
        xxhash_rust::xxh3::xxh3_64(payload)
    } else {
        0
    };
    Ok((
        Packet {
            ts_ns: frame.ts_ns,
            origin,
            src: Endpoint {
                ip: src_ip,
                port: src_port,
            },
            dst: Endpoint {
                ip: dst_ip,
                port: dst_port,
            },
            protocol,
            ttl,
            ip_id,
            tcp,
            payload_len: payload_len as u32,
            payload_hash,
            payload_truncated: captured < payload_len,
            wire_len: frame.wire_len,
        },
        version,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn frame(linktype: u16, data: &[u8]) -> Frame<'_> {
        Frame {
            ts_ns: 42,
            linktype,
            data,
            wire_len: data.len() as u32,
            offset: 0,
            interface: 0,
        }
    }

    fn tcp_ipv4(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1000, 65535)
            .ack(77)
            .psh();
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }

    #[test]
    fn every_link_type_yields_the_same_packet() {
        let ip = tcp_ipv4(b"GET / HTTP/1.1\r\n\r\n");
        let mut eth = vec![0u8; 12];
        eth.extend([0x08, 0x00]);
        eth.extend(&ip);
        let mut vlan = vec![0u8; 12];
        vlan.extend([0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        vlan.extend(&ip);
        let mut qinq = vec![0u8; 12];
        qinq.extend([0x88, 0xa8, 0x00, 0x05, 0x81, 0x00, 0x00, 0x06, 0x08, 0x00]);
        qinq.extend(&ip);
        let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
        sll.extend(&ip);
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 1, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0,
        ];
        sll2.extend(&ip);
        let mut null_le = 2u32.to_le_bytes().to_vec();
        null_le.extend(&ip);
        let mut loop_be = 2u32.to_be_bytes().to_vec();
        loop_be.extend(&ip);
        for (lt, data) in [
            (linktype::ETHERNET, &eth),
            (linktype::ETHERNET, &vlan),
            (linktype::ETHERNET, &qinq),
            (linktype::LINUX_SLL, &sll),
            (linktype::LINUX_SLL2, &sll2),
            (linktype::NULL, &null_le),
            (linktype::LOOP, &loop_be),
            (linktype::RAW, &ip),
            (linktype::IPV4, &ip),
        ] {
            let (p, v) = decode(&frame(lt, data), OriginId(3), DecodeOptions::default())
                .unwrap_or_else(|e| panic!("linktype {lt}: {e:?}"));
            assert_eq!(v, IpVersion::V4);
            assert_eq!(p.src.to_string(), "10.0.0.1:40000");
            assert_eq!(p.dst.to_string(), "10.0.0.2:80");
            assert_eq!(p.payload_len, 18);
            assert_eq!(
                p.payload_hash,
                xxhash_rust::xxh3::xxh3_64(b"GET / HTTP/1.1\r\n\r\n")
            );
            let t = p.tcp.unwrap();
            assert_eq!((t.seq, t.ack), (1000, 77));
            assert!(t.flags.has(TcpFlags::PSH | TcpFlags::ACK));
            assert_eq!(p.origin, OriginId(3));
        }
    }

    #[test]
    fn ipv6_with_extension_header_and_udp() {
        let b = PacketBuilder::ipv6([1; 16], [2; 16], 9).udp(5353, 53);
        let mut ip = Vec::new();
        b.write(&mut ip, b"dns?").unwrap();
        // Insert a hop-by-hop options header (8 bytes) after the fixed header.
        let mut with_ext = ip[..40].to_vec();
        with_ext[6] = 0; // next header: hop-by-hop
        let plen = u16::from_be_bytes([ip[4], ip[5]]) + 8;
        with_ext[4..6].copy_from_slice(&plen.to_be_bytes());
        with_ext.extend([17, 0, 1, 4, 0, 0, 0, 0]); // next=UDP, len=0 (8 bytes), PadN
        with_ext.extend(&ip[40..]);
        let (p, v) = decode(
            &frame(linktype::IPV6, &with_ext),
            OriginId(0),
            DecodeOptions::default(),
        )
        .unwrap();
        assert_eq!(v, IpVersion::V6);
        assert_eq!(p.protocol, Protocol::Udp);
        assert_eq!(p.dst.port, 53);
        assert_eq!(p.payload_len, 4);
        assert_eq!(p.ttl, 9);
    }

    #[test]
    fn snaplen_cut_keeps_true_payload_length() {
        let ip = tcp_ipv4(&[7u8; 1000]);
        let cut = &ip[..40 + 100];
        let (p, _) = decode(
            &frame(linktype::RAW, cut),
            OriginId(0),
            DecodeOptions::default(),
        )
        .unwrap();
        assert_eq!(p.payload_len, 1000);
        assert!(p.payload_truncated);
        assert_eq!(p.payload_hash, xxhash_rust::xxh3::xxh3_64(&[7u8; 100]));
    }

    #[test]
    fn non_tcp_udp_traffic_is_classified() {
        let mut arp = vec![0u8; 12];
        arp.extend([0x08, 0x06]);
        arp.extend([0u8; 28]);
        assert_eq!(
            decode(
                &frame(linktype::ETHERNET, &arp),
                OriginId(0),
                DecodeOptions::default()
            )
            .unwrap_err(),
            SkipReason::NonIp
        );
        let b = PacketBuilder::ipv4([1, 1, 1, 1], [2, 2, 2, 2], 5).icmpv4_echo_request(1, 1);
        let mut icmp = Vec::new();
        b.write(&mut icmp, b"ping").unwrap();
        assert_eq!(
            decode(
                &frame(linktype::RAW, &icmp),
                OriginId(0),
                DecodeOptions::default()
            )
            .unwrap_err(),
            SkipReason::OtherProtocol
        );
        let mut frag = tcp_ipv4(b"x");
        frag[6] = 0x20; // more fragments
        assert_eq!(
            decode(
                &frame(linktype::RAW, &frag),
                OriginId(0),
                DecodeOptions::default()
            )
            .unwrap_err(),
            SkipReason::IpFragment
        );
        assert_eq!(
            decode(&frame(999, &frag), OriginId(0), DecodeOptions::default()).unwrap_err(),
            SkipReason::UnsupportedLinktype
        );
        let ip = tcp_ipv4(b"");
        assert_eq!(
            decode(
                &frame(linktype::RAW, &ip[..30]),
                OriginId(0),
                DecodeOptions::default()
            )
            .unwrap_err(),
            SkipReason::MalformedHeader
        );
    }
}
