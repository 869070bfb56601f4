//! Socket names ([`Endpoint`]) and socket kinds ([`SocketKind`]) as the log stores them.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use serde::{Deserialize, Serialize};

use crate::error::{WireError, WireErrorKind};

/// Linux address family numbers the log uses (`AF_*`).
pub mod family {
    /// `AF_UNSPEC`.
    pub const UNSPEC: u16 = 0;
    /// `AF_UNIX` / `AF_LOCAL`.
    pub const UNIX: u16 = 1;
    /// `AF_INET`.
    pub const INET: u16 = 2;
    /// `AF_INET6`.
    pub const INET6: u16 = 10;
    /// `AF_NETLINK`.
    pub const NETLINK: u16 = 16;
    /// `AF_PACKET`.
    pub const PACKET: u16 = 17;
}

/// Linux socket type numbers the log uses (`SOCK_*`, without `SOCK_NONBLOCK`/`SOCK_CLOEXEC`).
pub mod sock_type {
    /// `SOCK_STREAM`.
    pub const STREAM: u16 = 1;
    /// `SOCK_DGRAM`.
    pub const DGRAM: u16 = 2;
    /// `SOCK_RAW`.
    pub const RAW: u16 = 3;
    /// `SOCK_SEQPACKET`.
    pub const SEQPACKET: u16 = 5;
}

/// Endpoint tags in the log (the first byte of an encoded endpoint).
pub mod tag {
    /// No name (AF_UNSPEC, or the name could not be read): the tag alone.
    pub const NONE: u8 = 0;
    /// UNIX-domain: tag, path length u8, path bytes.
    pub const UNIX: u8 = 1;
    /// IPv4: tag, address (4 bytes, network order), port u16 LE.
    pub const INET: u8 = 2;
    /// IPv6: tag, address (16 bytes, network order), port u16 LE, scope id u32 LE.
    pub const INET6: u8 = 10;
    /// Any other family: tag, family u16 LE.
    pub const OTHER: u8 = 255;
}

/// The longest UNIX socket path the format stores (`sun_path` is 108 bytes on Linux).
pub const MAX_UNIX_PATH: usize = 108;

/// One end of a socket: an IP address and port, a UNIX socket path, or neither.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Endpoint {
    /// No name: `AF_UNSPEC`, or the library could not read it.
    Unspecified,
    /// IPv4 or IPv6 address and port (IPv6 keeps its scope id; flow info is not stored).
    Inet(SocketAddr),
    /// A UNIX-domain socket name as the kernel returned it, without the trailing NUL: empty
    /// for an unnamed socket; a leading NUL byte marks the abstract namespace.
    Unix(Vec<u8>),
    /// A name of another family (netlink, packet, ...): only the family number is kept.
    Other {
        /// The `AF_*` number.
        family: u16,
    },
}

impl Endpoint {
    /// The IP endpoint, if this is one.
    pub fn inet(&self) -> Option<SocketAddr> {
        match self {
            Endpoint::Inet(a) => Some(*a),
            _ => None,
        }
    }

    /// The UNIX path, if this is a UNIX-domain name.
    pub fn unix_path(&self) -> Option<&[u8]> {
        match self {
            Endpoint::Unix(p) => Some(p),
            _ => None,
        }
    }

    /// Bytes this endpoint takes in the log.
    pub fn encoded_len(&self) -> usize {
        match self {
            Endpoint::Unspecified => 1,
            Endpoint::Inet(SocketAddr::V4(_)) => 1 + 4 + 2,
            Endpoint::Inet(SocketAddr::V6(_)) => 1 + 16 + 2 + 4,
            Endpoint::Unix(p) => 2 + p.len(),
            Endpoint::Other { .. } => 3,
        }
    }

    /// Appends the encoding to `out`. Fails when a UNIX path is longer than [`MAX_UNIX_PATH`].
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), crate::EncodeError> {
        match self {
            Endpoint::Unspecified => out.push(tag::NONE),
            Endpoint::Inet(SocketAddr::V4(a)) => {
                out.push(tag::INET);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_le_bytes());
            }
            Endpoint::Inet(SocketAddr::V6(a)) => {
                out.push(tag::INET6);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_le_bytes());
                out.extend_from_slice(&a.scope_id().to_le_bytes());
            }
            Endpoint::Unix(p) => {
                let len = u8::try_from(p.len())
                    .ok()
                    .filter(|&l| usize::from(l) <= MAX_UNIX_PATH)
                    .ok_or(crate::EncodeError::TooLong {
                        what: "UNIX socket path",
                        len: p.len(),
                        max: MAX_UNIX_PATH,
                    })?;
                out.push(tag::UNIX);
                out.push(len);
                out.extend_from_slice(p);
            }
            Endpoint::Other { family } => {
                out.push(tag::OTHER);
                out.extend_from_slice(&family.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Decodes the endpoint at the start of `bytes`; returns it and its length. `at` is the
    /// offset of `bytes` in the record, for errors.
    pub fn decode(bytes: &[u8], at: usize) -> Result<(Endpoint, usize), WireError> {
        let need = |n: usize| -> Result<&[u8], WireError> {
            bytes.get(..n).ok_or(WireError {
                offset: at,
                length: bytes.len(),
                kind: WireErrorKind::FieldOverrun {
                    field: "endpoint",
                    needed: n,
                    present: bytes.len(),
                },
            })
        };
        let t = *need(1)?.first().unwrap_or(&0);
        match t {
            tag::NONE => Ok((Endpoint::Unspecified, 1)),
            tag::INET => {
                let b = need(7)?;
                let ip = Ipv4Addr::new(b[1], b[2], b[3], b[4]);
                let port = u16::from_le_bytes([b[5], b[6]]);
                Ok((
                    Endpoint::Inet(SocketAddr::V4(SocketAddrV4::new(ip, port))),
                    7,
                ))
            }
            tag::INET6 => {
                let b = need(23)?;
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&b[1..17]);
                let port = u16::from_le_bytes([b[17], b[18]]);
                let scope = u32::from_le_bytes([b[19], b[20], b[21], b[22]]);
                let a = SocketAddrV6::new(Ipv6Addr::from(octets), port, 0, scope);
                Ok((Endpoint::Inet(SocketAddr::V6(a)), 23))
            }
            tag::UNIX => {
                let b = need(2)?;
                let len = usize::from(b[1]);
                if len > MAX_UNIX_PATH {
                    return Err(WireError {
                        offset: at + 1,
                        length: 1,
                        kind: WireErrorKind::BadUnixPathLength(b[1]),
                    });
                }
                let b = need(2 + len)?;
                Ok((Endpoint::Unix(b[2..].to_vec()), 2 + len))
            }
            tag::OTHER => {
                let b = need(3)?;
                Ok((
                    Endpoint::Other {
                        family: u16::from_le_bytes([b[1], b[2]]),
                    },
                    3,
                ))
            }
            other => Err(WireError {
                offset: at,
                length: 1,
                kind: WireErrorKind::UnknownEndpointTag(other),
            }),
        }
    }
}

impl fmt::Display for Endpoint {
    /// IP endpoints as `1.2.3.4:80` / `[::1]:80`; UNIX paths as themselves (lossy UTF-8),
    /// abstract names with a leading `@`, unnamed ones as `(unnamed)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unspecified => f.write_str("(unspecified)"),
            Endpoint::Inet(a) => write!(f, "{a}"),
            Endpoint::Unix(p) if p.is_empty() => f.write_str("(unnamed)"),
            Endpoint::Unix(p) => match p.split_first() {
                Some((0, rest)) => write!(f, "@{}", String::from_utf8_lossy(rest)),
                _ => f.write_str(&String::from_utf8_lossy(p)),
            },
            Endpoint::Other { family } => write!(f, "(family {family})"),
        }
    }
}

/// A socket's family, type and protocol, as passed to `socket(2)` or learnt afterwards.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SocketKind {
    /// `AF_*` number (see [`family`]).
    pub family: u16,
    /// `SOCK_*` number without the `SOCK_NONBLOCK`/`SOCK_CLOEXEC` bits (see [`sock_type`]).
    pub sock_type: u16,
    /// Protocol number; 0 when it was the default or is not known.
    pub protocol: u16,
}

impl SocketKind {
    /// Bytes this field takes in the log.
    pub const ENCODED_LEN: usize = 6;

    /// A stream socket (`SOCK_STREAM`).
    pub fn is_stream(&self) -> bool {
        self.sock_type == sock_type::STREAM
    }

    /// A datagram socket (`SOCK_DGRAM`).
    pub fn is_dgram(&self) -> bool {
        self.sock_type == sock_type::DGRAM
    }

    /// A UNIX-domain socket.
    pub fn is_unix(&self) -> bool {
        self.family == family::UNIX
    }

    /// An IPv4 or IPv6 socket.
    pub fn is_inet(&self) -> bool {
        self.family == family::INET || self.family == family::INET6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_endpoints() {
        let mut v = Vec::new();
        Endpoint::Inet("127.0.0.1:8080".parse().unwrap())
            .encode(&mut v)
            .unwrap();
        assert_eq!(v, [2, 127, 0, 0, 1, 0x90, 0x1f]);
        v.clear();
        Endpoint::Unix(b"/tmp/s".to_vec()).encode(&mut v).unwrap();
        assert_eq!(v, [1, 6, b'/', b't', b'm', b'p', b'/', b's']);
        v.clear();
        Endpoint::Inet("[::1]:53".parse().unwrap())
            .encode(&mut v)
            .unwrap();
        assert_eq!(v.len(), 23);
        assert_eq!(v[0], 10);
        assert_eq!(v[16], 1);
        assert_eq!(&v[17..19], &[53, 0]);
    }

    #[test]
    fn display() {
        assert_eq!(Endpoint::Unix(b"\0x".to_vec()).to_string(), "@x");
        assert_eq!(Endpoint::Unix(Vec::new()).to_string(), "(unnamed)");
        assert_eq!(
            Endpoint::Inet("[::1]:5".parse().unwrap()).to_string(),
            "[::1]:5"
        );
    }

    #[test]
    fn decode_rejects() {
        assert!(Endpoint::decode(&[9], 0).is_err());
        assert!(Endpoint::decode(&[2, 1, 2], 0).is_err());
        assert!(Endpoint::decode(&[1, 200], 0).is_err());
        assert!(Endpoint::decode(&[], 0).is_err());
        let long = Endpoint::Unix(vec![b'a'; 109]);
        assert!(long.encode(&mut Vec::new()).is_err());
    }
}
