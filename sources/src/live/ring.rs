//! The kernel side of the live sniffer: an AF_PACKET socket with a memory-mapped TPACKET_V3
//! receive ring (Documentation/networking/packet_mmap.rst). All of the sniffer's unsafe code
//! is in this module, each block with its reason; what it offers on top is safe.
//!
//! - **Input**: the packets of one interface (or of all, `ifindex` 0), as the kernel hands
//!   them to packet sockets, after the classic BPF program attached with `SO_ATTACH_FILTER`
//!   (which also cuts them to the snap length).
//! - **Output**: [`RingPacket`]s borrowing the ring: timestamp (ns, from the packet's ring
//!   header), wire length, the captured bytes and the `sockaddr_ll` the kernel filled in
//!   (protocol, interface, hardware type, packet type, link-layer address).
//! - **The ring**: `block_count` blocks of `block_size` bytes shared with the kernel. The
//!   kernel fills a block with packets and hands it to user space (`TP_STATUS_USER` in the
//!   block's status word) when it is full or `retire` after it was opened, so that a quiet
//!   link still delivers within that time. [`PacketRing::next_packet`] walks the packets of the
//!   block it holds and gives the block back (`TP_STATUS_KERNEL`) when it moves to the next.
//!   [`PacketRing::wait`] blocks in `poll(2)` until a block is ready.
//! - **State**: the mapping (`block_size × block_count` bytes, 16 MiB by default) and a
//!   cursor in the current block. Freed (unmapped, socket closed) on drop.
//! - **Cost**: no copy and no system call per packet: one `poll` per block at most, one
//!   atomic load and store per block, bounds checks per packet header.
//!
//! When every block is full the kernel drops packets and counts them; [`PacketRing::statistics`]
//! reads (and resets) those counters (`PACKET_STATISTICS`).

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::RingConfig;
use super::filter::Program;

/// `TPACKET_V3` (enum tpacket_versions).
const TPACKET_V3: libc::c_int = 2;
/// `ETH_P_ALL`, in network byte order as `bind` wants it.
const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();

// struct tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1.
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const BLOCK_LEN: usize = 20;
/// Size of the block descriptor (tpacket_block_desc with tpacket_hdr_v1, 8-byte aligned).
const BLOCK_HEADER: usize = 48;
// struct tpacket3_hdr.
const PKT_NEXT: usize = 0;
const PKT_SEC: usize = 4;
const PKT_NSEC: usize = 8;
const PKT_SNAPLEN: usize = 12;
const PKT_LEN: usize = 16;
const PKT_STATUS: usize = 20;
const PKT_MAC: usize = 24;
const PKT_NET: usize = 26;
const PKT_VLAN_TCI: usize = 32;
const PKT_VLAN_TPID: usize = 36;
/// TPACKET_ALIGN(sizeof(struct tpacket3_hdr)): where the sockaddr_ll starts.
const PKT_HEADER: usize = 48;
/// sizeof(struct sockaddr_ll).
const SLL_LEN: usize = 20;

/// `TP_STATUS_USER`: the block belongs to user space.
const TP_STATUS_USER: u32 = 1;
/// `TP_STATUS_KERNEL`: the block belongs to the kernel.
const TP_STATUS_KERNEL: u32 = 0;
/// `TP_STATUS_VLAN_VALID`: `tp_vlan_tci` holds a tag the driver removed.
pub(crate) const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `TP_STATUS_VLAN_TPID_VALID`: `tp_vlan_tpid` is set.
pub(crate) const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// Which socket type: link-layer headers included (SOCK_RAW) or not (SOCK_DGRAM, "cooked").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketKind {
    /// Frames from the link-layer header on.
    Raw,
    /// Packets from the network header on, with the link layer described in `sockaddr_ll`.
    Dgram,
}

/// A failed system call while setting the ring up.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {error}")]
pub struct RingError {
    /// What was being done.
    pub call: &'static str,
    /// The system's error.
    pub error: io::Error,
}

impl RingError {
    fn last(call: &'static str) -> Self {
        RingError {
            call,
            error: io::Error::last_os_error(),
        }
    }

    /// Whether the error means "not permitted" (no CAP_NET_RAW).
    pub fn is_permission(&self) -> bool {
        matches!(self.error.raw_os_error(), Some(libc::EPERM | libc::EACCES))
    }
}

/// Kernel counters since the previous read (`struct tpacket_stats_v3`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets that passed the filter (those dropped included).
    pub packets: u64,
    /// Packets dropped because the ring was full.
    pub drops: u64,
    /// Times the ring was found full (its queue frozen).
    pub freezes: u64,
}

/// One packet in the ring, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct RingPacket<'a> {
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire (from the link-layer header for SOCK_RAW, the network header for
    /// SOCK_DGRAM).
    pub wire_len: u32,
    /// The captured bytes, from the same place.
    pub data: &'a [u8],
    /// `tp_status` of the packet (VLAN flags).
    pub status: u32,
    /// VLAN tag the driver removed, when `status` says so.
    pub vlan_tci: u16,
    /// Its TPID, when `status` says so.
    pub vlan_tpid: u16,
    /// What the kernel says of the packet's link layer.
    pub link: LinkInfo,
}

/// The `sockaddr_ll` of a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkInfo {
    /// Link-layer protocol (EtherType), host order.
    pub protocol: u16,
    /// Interface index.
    pub ifindex: u32,
    /// ARPHRD_* hardware type of the interface.
    pub hatype: u16,
    /// PACKET_HOST, PACKET_OUTGOING, ...
    pub pkttype: u8,
    /// Length of the link-layer address.
    pub halen: u8,
    /// The link-layer address (source for received packets), zero-padded.
    pub addr: [u8; 8],
}

/// Where one packet lies in its block, and its header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Located {
    ts_ns: u64,
    wire_len: u32,
    start: usize,
    len: usize,
    status: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    link: LinkInfo,
    next: usize,
}

/// A packet header that points outside its block (should not happen; the rest of the block
/// is skipped and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadBlock {
    /// Offset of the offending header in the block.
    pub offset: usize,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The packet count and first packet's offset of a block the kernel handed over.
fn block_header(block: &[u8]) -> Option<(u32, usize)> {
    let n = u32_at(block, BLOCK_NUM_PKTS)?;
    let first = u32_at(block, BLOCK_FIRST_PKT)? as usize;
    let len = u32_at(block, BLOCK_LEN)? as usize;
    if len > block.len() || (n > 0 && first < BLOCK_HEADER) {
        return None;
    }
    Some((n, first))
}

/// Parses the packet header at `offset` of `block` (checked: every offset stays inside).
fn locate(block: &[u8], offset: usize) -> Result<Located, BadBlock> {
    let bad = BadBlock { offset };
    let h = block
        .get(offset..offset + PKT_HEADER + SLL_LEN)
        .ok_or(bad)?;
    let field = |at| u32_at(h, at).ok_or(bad);
    let half = |at| u16_at(h, at).ok_or(bad);
    let sll = &h[PKT_HEADER..];
    let mac = usize::from(half(PKT_MAC)?);
    let snaplen = field(PKT_SNAPLEN)? as usize;
    let start = offset + mac;
    if mac < PKT_HEADER + SLL_LEN || start + snaplen > block.len() {
        return Err(bad);
    }
    let _net = half(PKT_NET)?;
    let next = field(PKT_NEXT)? as usize;
    let mut addr = [0u8; 8];
    addr.copy_from_slice(&sll[12..20]);
    Ok(Located {
        ts_ns: u64::from(field(PKT_SEC)?) * 1_000_000_000 + u64::from(field(PKT_NSEC)?),
        wire_len: field(PKT_LEN)?,
        start,
        len: snaplen,
        status: field(PKT_STATUS)?,
        vlan_tci: field(PKT_VLAN_TCI)? as u16,
        vlan_tpid: half(PKT_VLAN_TPID)?,
        link: LinkInfo {
            protocol: u16::from_be_bytes([sll[2], sll[3]]),
            ifindex: i32::from_ne_bytes([sll[4], sll[5], sll[6], sll[7]]) as u32,
            hatype: u16::from_ne_bytes([sll[8], sll[9]]),
            pkttype: sll[10],
            halen: sll[11],
            addr,
        },
        next: if next == 0 {
            block.len()
        } else {
            offset + next
        },
    })
}

/// Where the reader is in the block it holds.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    left: u32,
    offset: usize,
}

/// An AF_PACKET socket bound to an interface with a TPACKET_V3 receive ring.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    block_size: usize,
    block_count: usize,
    current: usize,
    cursor: Option<Cursor>,
    /// Whether the kernel accepted the filter program.
    filter_attached: bool,
    /// Blocks with a header that pointed outside them.
    damaged: u64,
}

// SAFETY: the mapping and the socket are owned by this value alone and may be used from any
// thread; nothing in them is tied to the thread that created them.
unsafe impl Send for PacketRing {}

fn check(ret: libc::c_int, call: &'static str) -> Result<(), RingError> {
    if ret < 0 {
        Err(RingError::last(call))
    } else {
        Ok(())
    }
}

fn set_option<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    call: &'static str,
) -> Result<(), RingError> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes for the duration of the
    // call; the kernel only reads it.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(ret, call)
}

impl PacketRing {
    /// Opens a packet socket of `kind` on interface `ifindex` (0: every interface), attaches
    /// `program` (if the kernel refuses it, [`PacketRing::filter_attached`] says so and the
    /// caller filters in user space), maps the ring and binds.
    pub fn open(
        ifindex: u32,
        kind: SocketKind,
        program: &Program,
        config: RingConfig,
    ) -> Result<PacketRing, RingError> {
        let sock_type = match kind {
            SocketKind::Raw => libc::SOCK_RAW,
            SocketKind::Dgram => libc::SOCK_DGRAM,
        };
        // Protocol 0: nothing is received until `bind` names ETH_P_ALL, so no packet gets in
        // before the filter is attached.
        // SAFETY: plain system call with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_PACKET, sock_type | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(RingError::last("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a descriptor we just opened and own alone.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        set_option(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &TPACKET_V3,
            "setsockopt(PACKET_VERSION, TPACKET_V3)",
        )?;
        let mut insns: Vec<libc::sock_filter> = program
            .insns
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let fprog = libc::sock_fprog {
            len: insns.len() as libc::c_ushort,
            filter: insns.as_mut_ptr(),
        };
        // `insns` outlives the call that reads it through `fprog`.
        let filter_attached = set_option(
            raw,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog,
            "setsockopt(SO_ATTACH_FILTER)",
        )
        .is_ok();
        drop(insns);
        let page = 4096;
        if config.block_size % page != 0 || !config.block_size.is_power_of_two() {
            return Err(RingError {
                call: "ring size",
                error: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "block size must be a power of two multiple of 4096",
                ),
            });
        }
        let frame_size = 2048usize;
        let req = libc::tpacket_req3 {
            tp_block_size: config.block_size as libc::c_uint,
            tp_block_nr: config.block_count as libc::c_uint,
            tp_frame_size: frame_size as libc::c_uint,
            tp_frame_nr: (config.block_size / frame_size * config.block_count) as libc::c_uint,
            tp_retire_blk_tov: config.retire.as_millis().clamp(1, 1000) as libc::c_uint,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        set_option(
            raw,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &req,
            "setsockopt(PACKET_RX_RING)",
        )?;
        let map_len = config.block_size * config.block_count;
        // SAFETY: maps `map_len` bytes of the socket's ring, shared with the kernel; the
        // result is checked before use and unmapped in `Drop`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::last("mmap(ring)"));
        }
        let Some(map) = NonNull::new(ptr.cast::<u8>()) else {
            return Err(RingError::last("mmap(ring)"));
        };
        let ring = PacketRing {
            fd,
            map,
            map_len,
            block_size: config.block_size,
            block_count: config.block_count,
            current: 0,
            cursor: None,
            filter_attached,
            damaged: 0,
        };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as libc::c_ushort;
        addr.sll_protocol = ETH_P_ALL_BE;
        addr.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `addr` is a valid sockaddr_ll of the length given.
        let ret = unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        check(ret, "bind")?;
        Ok(ring)
    }

    /// Whether the kernel runs the filter (else the caller must).
    pub fn filter_attached(&self) -> bool {
        self.filter_attached
    }

    /// Blocks whose content was inconsistent and skipped so far.
    pub fn damaged_blocks(&self) -> u64 {
        self.damaged
    }

    /// The status word of block `i`, read with acquire ordering: the block's contents are
    /// visible once it says `TP_STATUS_USER`.
    fn status(&self, i: usize) -> u32 {
        // SAFETY: `i < block_count`, so the word lies inside the mapping; it is 4-byte
        // aligned (the mapping is page-aligned, blocks are page multiples); the kernel
        // writes it concurrently, hence the atomic access.
        unsafe {
            AtomicU32::from_ptr(
                self.map
                    .as_ptr()
                    .add(i * self.block_size + BLOCK_STATUS)
                    .cast(),
            )
        }
        .load(Ordering::Acquire)
    }

    /// Hands block `i` back to the kernel.
    fn release(&mut self, i: usize) {
        // SAFETY: as in `status`; no slice of the block is alive (`&mut self`), and the
        // release ordering makes our reads of it happen before the kernel reuses it.
        unsafe {
            AtomicU32::from_ptr(
                self.map
                    .as_ptr()
                    .add(i * self.block_size + BLOCK_STATUS)
                    .cast(),
            )
        }
        .store(TP_STATUS_KERNEL, Ordering::Release);
    }

    /// The bytes of block `i`. Only for the block held (`cursor` is set for it after its
    /// status said `TP_STATUS_USER`): the kernel does not write a block user space holds.
    fn block(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.block_count);
        // SAFETY: the range lies inside the mapping, which lives as long as `self`; the block
        // belongs to user space until `release`, which needs `&mut self`, so the kernel does
        // not modify it while this borrow lives.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(i * self.block_size), self.block_size)
        }
    }

    /// Moves to the next packet if one is ready: its block and where it lies.
    fn advance(&mut self) -> Option<Located> {
        loop {
            match self.cursor {
                Some(c) if c.left == 0 => {
                    self.cursor = None;
                    self.release(self.current);
                    self.current = (self.current + 1) % self.block_count;
                }
                Some(c) => match locate(self.block(self.current), c.offset) {
                    Ok(l) => {
                        self.cursor = Some(Cursor {
                            left: c.left - 1,
                            offset: l.next,
                        });
                        return Some(l);
                    }
                    Err(_) => {
                        self.damaged += 1;
                        self.cursor = Some(Cursor { left: 0, offset: 0 });
                    }
                },
                None => {
                    if self.status(self.current) & TP_STATUS_USER == 0 {
                        return None;
                    }
                    match block_header(self.block(self.current)) {
                        Some((n, first)) => {
                            self.cursor = Some(Cursor {
                                left: n,
                                offset: first,
                            });
                        }
                        None => {
                            self.damaged += 1;
                            self.cursor = Some(Cursor { left: 0, offset: 0 });
                        }
                    }
                }
            }
        }
    }

    /// The next packet, if the kernel has handed one over; never blocks. A block is given
    /// back to the kernel when the packet after its last is asked for.
    pub fn next_packet(&mut self) -> Option<RingPacket<'_>> {
        let l = self.advance()?;
        let block = self.block(self.current);
        Some(RingPacket {
            ts_ns: l.ts_ns,
            wire_len: l.wire_len,
            data: &block[l.start..l.start + l.len],
            status: l.status,
            vlan_tci: l.vlan_tci,
            vlan_tpid: l.vlan_tpid,
            link: l.link,
        })
    }

    /// Waits up to `timeout` for the kernel to hand over a block. Returns whether one may be
    /// ready (an interrupted wait returns false).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        if self.cursor.is_some() || self.status(self.current) & TP_STATUS_USER != 0 {
            return Ok(true);
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(ret > 0)
    }

    /// Reads and resets the kernel's counters.
    pub fn statistics(&self) -> io::Result<KernelStats> {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the sizes given.
        let ret = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(KernelStats {
            packets: u64::from(st.tp_packets),
            drops: u64::from(st.tp_drops),
            freezes: u64::from(st.tp_freeze_q_cnt),
        })
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no borrow of it outlives `self`.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
        // The socket closes when `fd` drops, after this.
    }
}

/// The index of the interface named `name`.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that lives for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

/// The ARPHRD_* hardware type of the interface named `name` (SIOCGIFHWADDR).
pub fn hardware_type(name: &str) -> io::Result<u16> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: plain system call with constant arguments.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and own alone.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq with a NUL-terminated name (zeroed beyond it); the
    // kernel writes the hardware address into it.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR as _, &mut req) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after SIOCGIFHWADDR the union holds `ifru_hwaddr`.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_offsets_match_the_kernel_structs() {
        assert_eq!(std::mem::size_of::<libc::tpacket3_hdr>(), PKT_HEADER);
        assert_eq!(std::mem::size_of::<libc::sockaddr_ll>(), SLL_LEN);
        assert_eq!(
            std::mem::size_of::<libc::tpacket_block_desc>(),
            BLOCK_HEADER
        );
        assert_eq!(libc::TPACKET3_HDRLEN, PKT_HEADER + SLL_LEN);
        let h = libc::tpacket3_hdr {
            tp_next_offset: 1,
            tp_sec: 2,
            tp_nsec: 3,
            tp_snaplen: 4,
            tp_len: 5,
            tp_status: 6,
            tp_mac: 7,
            tp_net: 8,
            hv1: libc::tpacket_hdr_variant1 {
                tp_rxhash: 9,
                tp_vlan_tci: 10,
                tp_vlan_tpid: 11,
                tp_padding: 0,
            },
            tp_padding: [0; 8],
        };
        let base = &h as *const _ as usize;
        let at = |p: *const u8| p as usize - base;
        assert_eq!(at((&h.tp_next_offset as *const u32).cast()), PKT_NEXT);
        assert_eq!(at((&h.tp_sec as *const u32).cast()), PKT_SEC);
        assert_eq!(at((&h.tp_nsec as *const u32).cast()), PKT_NSEC);
        assert_eq!(at((&h.tp_snaplen as *const u32).cast()), PKT_SNAPLEN);
        assert_eq!(at((&h.tp_len as *const u32).cast()), PKT_LEN);
        assert_eq!(at((&h.tp_status as *const u32).cast()), PKT_STATUS);
        assert_eq!(at((&h.tp_mac as *const u16).cast()), PKT_MAC);
        assert_eq!(at((&h.tp_net as *const u16).cast()), PKT_NET);
        assert_eq!(at((&h.hv1.tp_vlan_tci as *const u32).cast()), PKT_VLAN_TCI);
        assert_eq!(
            at((&h.hv1.tp_vlan_tpid as *const u16).cast()),
            PKT_VLAN_TPID
        );
    }

    /// A block as the kernel lays it out: descriptor, then packets each with tpacket3_hdr,
    /// sockaddr_ll and data at `tp_mac`.
    fn block(packets: &[(&[u8], u8)]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        b[BLOCK_STATUS..BLOCK_STATUS + 4].copy_from_slice(&TP_STATUS_USER.to_ne_bytes());
        b[BLOCK_NUM_PKTS..BLOCK_NUM_PKTS + 4]
            .copy_from_slice(&(packets.len() as u32).to_ne_bytes());
        b[BLOCK_FIRST_PKT..BLOCK_FIRST_PKT + 4]
            .copy_from_slice(&(BLOCK_HEADER as u32).to_ne_bytes());
        let mut at = BLOCK_HEADER;
        for (i, (data, pkttype)) in packets.iter().enumerate() {
            let mac = 80usize;
            let len = (mac + data.len()).next_multiple_of(16);
            let next = if i + 1 == packets.len() { 0 } else { len };
            let h = &mut b[at..];
            h[PKT_NEXT..PKT_NEXT + 4].copy_from_slice(&(next as u32).to_ne_bytes());
            h[PKT_SEC..PKT_SEC + 4].copy_from_slice(&1_700_000_000u32.to_ne_bytes());
            h[PKT_NSEC..PKT_NSEC + 4].copy_from_slice(&(123 + i as u32).to_ne_bytes());
            h[PKT_SNAPLEN..PKT_SNAPLEN + 4].copy_from_slice(&(data.len() as u32).to_ne_bytes());
            h[PKT_LEN..PKT_LEN + 4].copy_from_slice(&(data.len() as u32 + 100).to_ne_bytes());
            h[PKT_MAC..PKT_MAC + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            h[PKT_NET..PKT_NET + 2].copy_from_slice(&(mac as u16).to_ne_bytes());
            let sll = &mut h[PKT_HEADER..PKT_HEADER + SLL_LEN];
            sll[0..2].copy_from_slice(&17u16.to_ne_bytes());
            sll[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
            sll[4..8].copy_from_slice(&3i32.to_ne_bytes());
            sll[8..10].copy_from_slice(&1u16.to_ne_bytes());
            sll[10] = *pkttype;
            sll[11] = 6;
            sll[12..18].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
            h[mac..mac + data.len()].copy_from_slice(data);
            at += len;
        }
        b[BLOCK_LEN..BLOCK_LEN + 4].copy_from_slice(&(at as u32).to_ne_bytes());
        b
    }

    #[test]
    fn packets_of_a_block_are_located() {
        let b = block(&[(b"first", 0), (b"second packet", 4)]);
        let (n, first) = block_header(&b).unwrap();
        assert_eq!((n, first), (2, BLOCK_HEADER));
        let p = locate(&b, first).unwrap();
        assert_eq!(&b[p.start..p.start + p.len], b"first");
        assert_eq!(p.ts_ns, 1_700_000_000_000_000_123);
        assert_eq!(p.wire_len, 105);
        assert_eq!(
            p.link,
            LinkInfo {
                protocol: 0x0800,
                ifindex: 3,
                hatype: 1,
                pkttype: 0,
                halen: 6,
                addr: [1, 2, 3, 4, 5, 6, 0, 0],
            }
        );
        let q = locate(&b, p.next).unwrap();
        assert_eq!(&b[q.start..q.start + q.len], b"second packet");
        assert_eq!(q.link.pkttype, 4);
        assert_eq!(q.next, b.len());
    }

    #[test]
    fn headers_pointing_outside_the_block_are_refused() {
        let mut b = block(&[(b"x", 0)]);
        let at = BLOCK_HEADER;
        b[at + PKT_SNAPLEN..at + PKT_SNAPLEN + 4].copy_from_slice(&5000u32.to_ne_bytes());
        assert_eq!(locate(&b, at), Err(BadBlock { offset: at }));
        assert_eq!(
            locate(&b, b.len() - 10),
            Err(BadBlock {
                offset: b.len() - 10
            })
        );
        let mut b = block(&[(b"x", 0)]);
        b[BLOCK_LEN..BLOCK_LEN + 4].copy_from_slice(&9999u32.to_ne_bytes());
        assert_eq!(block_header(&b), None);
    }
}
