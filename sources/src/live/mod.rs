//! The live sniffer: packets captured from a network interface as they pass, decoded into
//! [`Packet`](crate::Packet) observations like those read from a capture file, and optionally
//! saved as pcapng while they are analysed. Linux only (AF_PACKET); elsewhere
//! [`LiveReader::open`] fails with one line saying so.
//!
//! Layers, bottom up:
//! - [`filter`]: capture filters (`tcp and port 80`), parsed and compiled to classic BPF;
//! - `ring` (Linux): the AF_PACKET socket and its memory-mapped TPACKET_V3 ring, the only
//!   unsafe code of the sniffer;
//! - [`write`](mod@write): `--write FILE`, the frames as pcapng;
//! - [`LiveReader`]: the [`ObservationReader`](crate::reader::ObservationReader).
//!
//! # The live reader
//!
//! - **Input**: an interface by name, or `any` for all of them (including loopback). On an
//!   Ethernet or loopback interface the socket is SOCK_RAW and frames keep their Ethernet
//!   header (link type 1; VLAN tags the driver removed are put back, as libpcap does). On `any`
//!   and on other interface types the socket is SOCK_DGRAM and each packet gets the Linux
//!   cooked v2 header (`SLL2`, link type 276) built from what the kernel says of it, byte for
//!   byte as libpcap builds it: what `tcpdump -i any` writes. Loopback packets show up twice
//!   at a packet socket (sent and received); the sent copy is dropped, as libpcap does, so
//!   each is seen once.
//! - **Filter**: the capture filter and the snap length are compiled into one classic BPF
//!   program attached with `SO_ATTACH_FILTER`: packets that do not match never reach the ring,
//!   and the kernel copies at most the snap length of the others. Should the kernel refuse the
//!   program, the same program runs in user space on every packet read (with a warning).
//! - **Output**: [`Packet`](crate::Packet)s in [`Batch::packets`](crate::Batch::packets), decoded by
//!   [`decode`](crate::decode::decode) from exactly the bytes `--write` saves, so replaying
//!   that file gives the same observations. Timestamps are the kernel's, from each packet's
//!   ring header, in ns of the host's realtime clock.
//! - **When**: [`ObservationReader::read_batch`](crate::reader::ObservationReader::read_batch) takes what the ring holds, up to `max`
//!   packets, without blocking; when the ring holds nothing it waits in `poll(2)` up to
//!   [`POLL_WAIT`] for the kernel to hand over a block (blocks are handed over when full or
//!   [`RingConfig::retire`] after they were opened, so a quiet link still delivers within
//!   that time). It never ends on its own: the run's stop (Ctrl-C, SIGTERM, `--duration`,
//!   `--count`) ends it. Being live, its watermark follows [`ObservationReader::clock_now`](crate::reader::ObservationReader::clock_now),
//!   the realtime clock less what the ring may still hold back, so the frontier advances
//!   while the interface is quiet.
//! - **Counts**: like a capture file's reader (records, bytes, link types, protocols, skips
//!   by reason), plus the kernel's `PACKET_STATISTICS`, read (and reset) each time the counts
//!   are taken: `kernel_drops` (packets lost because the ring was full) and `ring_freezes`
//!   (times it was found full). Drops are also warned about.
//! - **State**: the ring (16 MiB by default, [`RingConfig`]), one frame of scratch space, the
//!   `--write` buffer. All freed when the reader is dropped at the end of the run, after the
//!   file has been given its statistics block and flushed.
//! - **Cost**: per packet, a copy only for cooked (SLL2) frames and VLAN-tagged ones (to put
//!   the header in front), one decode, and the `--write` copy; no system call per packet.

pub mod filter;
#[cfg(target_os = "linux")]
pub mod ring;
pub mod write;

use std::path::PathBuf;
use std::time::Duration;

use crate::decode::DecodeOptions;
use crate::origin::OriginId;
use filter::{Filter, TooLong};

/// The longest `read_batch` waits for the kernel when the ring is empty.
pub const POLL_WAIT: Duration = Duration::from_millis(50);

/// The largest snap length (as tcpdump's).
pub const MAX_SNAPLEN: u32 = 262_144;
/// The smallest snap length: room for the link, IP and TCP headers with options.
pub const MIN_SNAPLEN: u32 = 128;

/// Size and timing of the kernel ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a power of two, a multiple of the page size, larger than the largest
    /// packet kept (the snap length plus headers).
    pub block_size: usize,
    /// Number of blocks.
    pub block_count: usize,
    /// How long the kernel keeps a block that is not full before handing it over
    /// (`tp_retire_blk_tov`, whole milliseconds).
    pub retire: Duration,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            block_size: 1 << 20,
            block_count: 16,
            retire: Duration::from_millis(20),
        }
    }
}

impl RingConfig {
    /// The configuration with blocks large enough for `snaplen` bytes of packet (the total
    /// size kept when the blocks must grow).
    pub fn for_snaplen(mut self, snaplen: u32) -> Self {
        let need = (snaplen as usize + 4096).next_power_of_two();
        if self.block_size < need {
            let total = self.block_size * self.block_count;
            self.block_size = need;
            self.block_count = (total / need).max(2);
        }
        self
    }

    /// How old a packet the ring has not handed over yet can be: two retire periods, plus
    /// the longest wait, plus a margin for scheduling.
    pub fn hold_back(&self) -> Duration {
        2 * self.retire + POLL_WAIT + Duration::from_millis(50)
    }
}

/// What to capture and how.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Interface name, or `any`.
    pub interface: String,
    /// Bytes kept of each packet, link-layer header included.
    pub snaplen: u32,
    /// Capture filter.
    pub filter: Option<Filter>,
    /// Where to save what is captured, as pcapng.
    pub write: Option<PathBuf>,
    /// The kernel ring.
    pub ring: RingConfig,
}

impl LiveConfig {
    /// Capture on `interface` with the defaults: whole packets (262144 bytes), no filter.
    pub fn new(interface: &str) -> Self {
        LiveConfig {
            interface: interface.to_owned(),
            snaplen: MAX_SNAPLEN,
            filter: None,
            write: None,
            ring: RingConfig::default(),
        }
    }
}

/// Why live capture could not start. Each renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Not Linux.
    #[error("live capture (--live) is only supported on Linux")]
    Unsupported,
    /// No CAP_NET_RAW.
    #[error(
        "capturing on {interface} needs CAP_NET_RAW (run as root or `setcap cap_net_raw+ep $(which causeway)`)"
    )]
    Permission {
        /// The interface.
        interface: String,
    },
    /// No such interface.
    #[error(
        "no network interface named {interface} here (see `ip link`; `any` captures on all of them)"
    )]
    NoInterface {
        /// The interface.
        interface: String,
    },
    /// Another failure setting up the socket and its ring.
    #[error("capturing on {interface}: {error}")]
    Setup {
        /// The interface.
        interface: String,
        /// What failed.
        error: String,
    },
    /// The snap length is out of range.
    #[error("--snaplen {0}: must be between {MIN_SNAPLEN} and {MAX_SNAPLEN}")]
    Snaplen(u32),
    /// The filter is too long for the kernel.
    #[error("--filter: {0}")]
    TooLong(#[from] TooLong),
    /// The `--write` file could not be created.
    #[error("--write {path}: {error}")]
    Write {
        /// The file.
        path: String,
        /// The system's error.
        error: std::io::Error,
    },
}

pub use imp::LiveReader;

#[cfg(target_os = "linux")]
mod imp {
    use std::time::SystemTime;

    use super::filter::{Layout, Probe, Program, capture_core, compile};
    use super::ring::{
        LinkInfo, PacketRing, SocketKind, TP_STATUS_VLAN_TPID_VALID, TP_STATUS_VLAN_VALID,
        hardware_type, interface_index,
    };
    use super::write::{CaptureTotals, CaptureWriter};
    use super::{
        DecodeOptions, LiveConfig, LiveError, MAX_SNAPLEN, MIN_SNAPLEN, OriginId, POLL_WAIT,
    };
    use crate::decode::linktype;
    use crate::observation::{Batch, Nanos};
    use crate::pcap::Frame;
    use crate::reader::ObservationReader;
    use crate::stats::SourceStats;
    use crate::{Warning, warning_limit};

    /// ARPHRD_ETHER.
    const ARPHRD_ETHER: u16 = 1;
    /// ARPHRD_LOOPBACK.
    const ARPHRD_LOOPBACK: u16 = 772;
    /// Length of a Linux cooked v2 header.
    const SLL2_LEN: usize = 20;

    /// How frames are presented.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Link {
        /// SOCK_RAW on Ethernet or loopback: the frame as on the wire.
        Ethernet,
        /// SOCK_DGRAM: a cooked v2 header in front of the network packet.
        Cooked,
    }

    /// The Linux cooked v2 header libpcap puts in front of a packet from a SOCK_DGRAM socket
    /// (pcap-linux.c): protocol, reserved, interface index, hardware type, packet type,
    /// address length, address (8 bytes), multi-byte fields big-endian.
    pub(crate) fn sll2_header(link: &LinkInfo) -> [u8; SLL2_LEN] {
        let mut h = [0u8; SLL2_LEN];
        h[0..2].copy_from_slice(&link.protocol.to_be_bytes());
        h[4..8].copy_from_slice(&link.ifindex.to_be_bytes());
        h[8..10].copy_from_slice(&link.hatype.to_be_bytes());
        h[10] = link.pkttype;
        h[11] = link.halen;
        h[12..20].copy_from_slice(&link.addr);
        h
    }

    fn realtime_ns() -> Nanos {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// Packets captured live from a network interface (see the module documentation).
    pub struct LiveReader {
        origin: OriginId,
        interface: String,
        ring: PacketRing,
        link: Link,
        /// The filter program, when the kernel refused it and it runs here.
        userspace: Option<Program>,
        snaplen: u32,
        loopback: Option<u32>,
        decode: DecodeOptions,
        hold_back: u64,
        /// When the ring was last found empty (realtime, ns): every packet stamped more than
        /// `hold_back` before it has been read. The watermark follows this, not the clock, so
        /// a reader that falls behind (a busy worker) does not make its backlog late.
        drained_ns: Nanos,
        frame: Vec<u8>,
        writer: Option<CaptureWriter>,
        stats: SourceStats,
        totals: CaptureTotals,
        frames: u64,
        damaged_seen: u64,
        warnings: Vec<Warning>,
        shown: usize,
    }

    impl std::fmt::Debug for LiveReader {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("LiveReader")
                .field("interface", &self.interface)
                .field("link", &self.link)
                .field("frames", &self.frames)
                .finish()
        }
    }

    impl LiveReader {
        /// Opens the socket and its ring on `config.interface`, attaches the filter, and
        /// creates the `--write` file. Needs CAP_NET_RAW.
        pub fn open(
            origin: OriginId,
            config: &LiveConfig,
            decode: DecodeOptions,
        ) -> Result<LiveReader, LiveError> {
            let name = config.interface.as_str();
            if !(MIN_SNAPLEN..=MAX_SNAPLEN).contains(&config.snaplen) {
                return Err(LiveError::Snaplen(config.snaplen));
            }
            let loopback = interface_index("lo").ok();
            let (ifindex, link) = if name == "any" {
                (0, Link::Cooked)
            } else {
                let index = interface_index(name).map_err(|_| LiveError::NoInterface {
                    interface: name.to_owned(),
                })?;
                let link = match hardware_type(name) {
                    Ok(ARPHRD_ETHER | ARPHRD_LOOPBACK) => Link::Ethernet,
                    Ok(_) => Link::Cooked,
                    Err(e) => {
                        return Err(LiveError::Setup {
                            interface: name.to_owned(),
                            error: format!("reading its hardware type: {e}"),
                        });
                    }
                };
                (index, link)
            };
            let (kind, layout, linktype, kernel_snap) = match link {
                Link::Ethernet => (
                    SocketKind::Raw,
                    Layout { nh: 14 },
                    linktype::ETHERNET,
                    config.snaplen,
                ),
                Link::Cooked => (
                    SocketKind::Dgram,
                    Layout { nh: 0 },
                    linktype::LINUX_SLL2,
                    config.snaplen - SLL2_LEN as u32,
                ),
            };
            // Outgoing copies of loopback packets: only where loopback can be seen.
            let drop_outgoing_on = loopback.filter(|lo| ifindex == 0 || ifindex == *lo);
            let core = capture_core(config.filter.as_ref(), drop_outgoing_on);
            let program = compile(&core, layout, kernel_snap)?;
            let ring_config = config.ring.for_snaplen(config.snaplen);
            let ring = PacketRing::open(ifindex, kind, &program, ring_config).map_err(|e| {
                if e.is_permission() {
                    LiveError::Permission {
                        interface: name.to_owned(),
                    }
                } else {
                    LiveError::Setup {
                        interface: name.to_owned(),
                        error: e.to_string(),
                    }
                }
            })?;
            let mut warnings = Vec::new();
            let userspace = if ring.filter_attached() {
                None
            } else {
                warnings.push(Warning {
                    origin,
                    path: name.to_owned(),
                    offset: None,
                    message: "the kernel refused the capture filter program; filtering in user \
                              space (every packet is copied to the ring)"
                        .to_owned(),
                });
                Some(program)
            };
            let writer = match &config.write {
                Some(path) => Some(
                    CaptureWriter::create(
                        path,
                        linktype,
                        config.snaplen,
                        name,
                        config.filter.as_ref().map(|f| f.text()),
                    )
                    .map_err(|error| LiveError::Write {
                        path: path.display().to_string(),
                        error,
                    })?,
                ),
                None => None,
            };
            let mut stats = SourceStats::default();
            stats
                .formats
                .insert("live (AF_PACKET, TPACKET_V3)".to_owned(), 1);
            Ok(LiveReader {
                origin,
                interface: name.to_owned(),
                ring,
                link,
                userspace,
                snaplen: config.snaplen,
                loopback,
                decode,
                hold_back: ring_config.hold_back().as_nanos() as u64,
                drained_ns: realtime_ns(),
                frame: Vec::with_capacity(config.snaplen as usize + SLL2_LEN + 4),
                writer,
                stats,
                totals: CaptureTotals {
                    start_ns: realtime_ns(),
                    ..CaptureTotals::default()
                },
                frames: 0,
                damaged_seen: 0,
                warnings,
                shown: 0,
            })
        }

        /// The link type of the frames it produces (and writes).
        pub fn linktype(&self) -> u16 {
            match self.link {
                Link::Ethernet => linktype::ETHERNET,
                Link::Cooked => linktype::LINUX_SLL2,
            }
        }

        fn warn(&mut self, message: String) {
            if self.shown < warning_limit() {
                self.shown += 1;
                self.warnings.push(Warning {
                    origin: self.origin,
                    path: self.interface.clone(),
                    offset: None,
                    message,
                });
            }
        }

        /// Reads the kernel's counters into the stats (they reset on reading).
        fn kernel_counts(&mut self) {
            match self.ring.statistics() {
                Ok(k) => {
                    self.stats.kernel_drops += k.drops;
                    self.stats.ring_freezes += k.freezes;
                    self.totals.received += k.packets;
                    self.totals.dropped += k.drops;
                    if k.drops > 0 {
                        self.warn(format!(
                            "the kernel dropped {} packets: the ring was full (the analysis did \
                             not keep up; a --filter keeps out what is not needed)",
                            k.drops
                        ));
                    }
                }
                Err(e) => self.warn(format!("reading the kernel's packet counters: {e}")),
            }
            let damaged = self.ring.damaged_blocks();
            if damaged > self.damaged_seen {
                self.damaged_seen = damaged;
                self.warn(format!(
                    "{damaged} ring blocks with inconsistent headers skipped"
                ));
            }
        }

        fn finish_file(&mut self) {
            if let Some(mut w) = self.writer.take() {
                let totals = CaptureTotals {
                    end_ns: realtime_ns(),
                    ..self.totals
                };
                if let Err(e) = w.finish(totals) {
                    tracing::warn!("--write {}: {e}", w.path().display());
                }
            }
        }
    }

    impl ObservationReader for LiveReader {
        fn origin(&self) -> OriginId {
            self.origin
        }

        fn is_live(&self) -> bool {
            true
        }

        fn clock_now(&self) -> Option<Nanos> {
            Some(self.drained_ns.saturating_sub(self.hold_back))
        }

        fn reserve(&self, max: usize, out: &mut Batch) {
            out.packets.reserve(max);
        }

        fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
            let origin = self.origin;
            let mut produced = 0usize;
            let mut waited = false;
            let mut write_error = None;
            let mut wrote = false;
            let mut drained_at = None;
            loop {
                let started = realtime_ns();
                let LiveReader {
                    ring,
                    link,
                    userspace,
                    snaplen,
                    loopback,
                    decode: options,
                    frame,
                    writer,
                    stats,
                    frames,
                    ..
                } = self;
                while produced < max {
                    let Some(p) = ring.next_packet() else {
                        drained_at = Some(started);
                        break;
                    };
                    if p.link.pkttype == super::filter::PACKET_OUTGOING as u8
                        && Some(p.link.ifindex) == *loopback
                    {
                        continue;
                    }
                    let mut keep = p.data.len();
                    if let Some(program) = userspace {
                        let verdict = program.run(&Probe {
                            data: p.data,
                            protocol: p.link.protocol,
                            pkttype: p.link.pkttype,
                            ifindex: p.link.ifindex,
                        });
                        if verdict == 0 {
                            continue;
                        }
                        keep = keep.min(verdict as usize);
                    }
                    let cap = *snaplen as usize;
                    let (bytes, wire_len): (&[u8], u32) = match *link {
                        Link::Ethernet if p.status & TP_STATUS_VLAN_VALID != 0 && keep >= 12 => {
                            let tpid = if p.status & TP_STATUS_VLAN_TPID_VALID != 0 {
                                p.vlan_tpid
                            } else {
                                0x8100
                            };
                            frame.clear();
                            frame.extend_from_slice(&p.data[..12]);
                            frame.extend_from_slice(&tpid.to_be_bytes());
                            frame.extend_from_slice(&p.vlan_tci.to_be_bytes());
                            frame.extend_from_slice(&p.data[12..keep]);
                            frame.truncate(cap);
                            (frame.as_slice(), p.wire_len.saturating_add(4))
                        }
                        Link::Ethernet => (&p.data[..keep.min(cap)], p.wire_len),
                        Link::Cooked => {
                            frame.clear();
                            frame.extend_from_slice(&sll2_header(&p.link));
                            frame.extend_from_slice(&p.data[..keep]);
                            frame.truncate(cap);
                            (frame.as_slice(), p.wire_len.saturating_add(SLL2_LEN as u32))
                        }
                    };
                    if let Some(w) = writer.as_mut() {
                        if let Err(e) = w.write(p.ts_ns, wire_len, bytes) {
                            write_error = Some(e);
                        } else {
                            wrote = true;
                        }
                    }
                    if write_error.is_some() {
                        *writer = None;
                    }
                    *frames += 1;
                    stats.record(p.ts_ns, u64::from(wire_len));
                    let lt = match *link {
                        Link::Ethernet => linktype::ETHERNET,
                        Link::Cooked => linktype::LINUX_SLL2,
                    };
                    *stats.linktypes.entry(lt).or_default() += 1;
                    let f = Frame {
                        ts_ns: p.ts_ns,
                        linktype: lt,
                        data: bytes,
                        wire_len,
                        offset: *frames,
                        interface: 0,
                    };
                    if crate::reader::decode_counted(&f, origin, *options, stats, out) {
                        produced += 1;
                    }
                }
                if produced > 0 || waited || produced >= max {
                    break;
                }
                waited = true;
                if let Err(e) = ring.wait(POLL_WAIT) {
                    let message = format!("waiting for packets: {e}");
                    self.warn(message);
                    std::thread::sleep(POLL_WAIT);
                    break;
                }
            }
            if let Some(t) = drained_at {
                self.drained_ns = self.drained_ns.max(t);
            }
            if let Some(e) = write_error {
                let path = self
                    .writer
                    .as_ref()
                    .map(|w| w.path().display().to_string())
                    .unwrap_or_else(|| "the capture file".to_owned());
                self.warn(format!(
                    "--write {path}: {e}; no longer writing (the analysis goes on)"
                ));
            } else if wrote {
                if let Some(w) = self.writer.as_mut() {
                    if let Err(e) = w.flush() {
                        let path = w.path().display().to_string();
                        self.writer = None;
                        self.warn(format!(
                            "--write {path}: {e}; no longer writing (the analysis goes on)"
                        ));
                    }
                }
            }
            true
        }

        fn take_stats(&mut self) -> SourceStats {
            self.kernel_counts();
            self.stats.take()
        }

        fn take_warnings(&mut self) -> Vec<Warning> {
            std::mem::take(&mut self.warnings)
        }
    }

    impl Drop for LiveReader {
        fn drop(&mut self) {
            self.finish_file();
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn cooked_header_is_libpcaps() {
            let h = sll2_header(&LinkInfo {
                protocol: 0x0800,
                ifindex: 3,
                hatype: 772,
                pkttype: 4,
                halen: 6,
                addr: [1, 2, 3, 4, 5, 6, 0, 0],
            });
            assert_eq!(
                h,
                [
                    0x08, 0x00, 0, 0, 0, 0, 0, 3, 0x03, 0x04, 4, 6, 1, 2, 3, 4, 5, 6, 0, 0
                ]
            );
        }

        /// Sends `n` datagrams over loopback to a fresh port and captures them on `interface`
        /// with a kernel filter on that port; None when not permitted to capture.
        fn capture_loopback(
            interface: &str,
            n: usize,
        ) -> Option<(Vec<crate::Packet>, SourceStats, std::path::PathBuf)> {
            let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = server.local_addr().unwrap().port();
            let dir = std::env::temp_dir()
                .join(format!("causeway-live-{}-{interface}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("cap.pcapng");
            let config = LiveConfig {
                filter: Some(
                    super::super::filter::Filter::parse(&format!("udp and port {port}")).unwrap(),
                ),
                write: Some(file.clone()),
                ..LiveConfig::new(interface)
            };
            let mut reader = match LiveReader::open(OriginId(0), &config, DecodeOptions::default())
            {
                Ok(r) => r,
                Err(e @ LiveError::Permission { .. }) => {
                    eprintln!("skipping live capture test: {e}");
                    std::fs::remove_dir_all(&dir).ok();
                    return None;
                }
                Err(e) => panic!("{e}"),
            };
            let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..n {
                client
                    .send_to(format!("datagram {i:04}").as_bytes(), ("127.0.0.1", port))
                    .unwrap();
            }
            let mut batch = Batch::default();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while batch.packets.len() < n && std::time::Instant::now() < deadline {
                assert!(reader.read_batch(16, &mut batch));
            }
            // Nothing more comes: each datagram was seen once.
            let extra = std::time::Instant::now() + std::time::Duration::from_millis(200);
            while std::time::Instant::now() < extra {
                reader.read_batch(16, &mut batch);
            }
            let stats = reader.take_stats();
            drop(reader);
            Some((batch.packets, stats, file))
        }

        #[test]
        fn loopback_datagrams_are_captured_once_each_with_the_kernel_filter() {
            for interface in ["lo", "any"] {
                let Some((packets, stats, file)) = capture_loopback(interface, 50) else {
                    return;
                };
                assert_eq!(packets.len(), 50, "{interface}: {packets:?}");
                assert!(packets.iter().all(
                    |p| p.payload_len == 13 && p.protocol == crate::observation::Protocol::Udp
                ));
                assert!(packets.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
                assert_eq!((stats.records, stats.udp, stats.kernel_drops), (50, 50, 0));
                let lt = if interface == "lo" {
                    linktype::ETHERNET
                } else {
                    linktype::LINUX_SLL2
                };
                assert_eq!(stats.linktypes.get(&lt), Some(&50), "{interface}");
                // The file holds the same frames, decoded the same.
                let spec = crate::InputSpec {
                    origin: OriginId(0),
                    path: file.display().to_string(),
                };
                let (mut replay, _) = crate::open(&spec, DecodeOptions::default(), None).unwrap();
                let mut again = Batch::default();
                while replay.read_batch(64, &mut again) {}
                assert_eq!(again.packets, packets, "{interface}: replayed file");
                if let Some(dir) = file.parent() {
                    std::fs::remove_dir_all(dir).ok();
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{DecodeOptions, LiveConfig, LiveError, OriginId};
    use crate::Warning;
    use crate::observation::Batch;
    use crate::reader::ObservationReader;
    use crate::stats::SourceStats;

    /// Packets captured live from a network interface: Linux only.
    #[derive(Debug)]
    pub struct LiveReader {
        never: std::convert::Infallible,
    }

    impl LiveReader {
        /// Fails: live capture needs Linux's AF_PACKET sockets.
        pub fn open(
            _origin: OriginId,
            _config: &LiveConfig,
            _decode: DecodeOptions,
        ) -> Result<LiveReader, LiveError> {
            Err(LiveError::Unsupported)
        }
    }

    impl ObservationReader for LiveReader {
        fn origin(&self) -> OriginId {
            match self.never {}
        }
        fn read_batch(&mut self, _max: usize, _out: &mut Batch) -> bool {
            match self.never {}
        }
        fn reserve(&self, _max: usize, _out: &mut Batch) {
            match self.never {}
        }
        fn take_stats(&mut self) -> SourceStats {
            match self.never {}
        }
        fn take_warnings(&mut self) -> Vec<Warning> {
            match self.never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_grow_for_large_snap_lengths() {
        let c = RingConfig::default().for_snaplen(262_144);
        assert_eq!(c.block_size, 1 << 20);
        let c = RingConfig::default().for_snaplen(4 << 20);
        assert_eq!(c.block_size, 8 << 20);
        assert_eq!(c.block_count, 2);
    }
}
