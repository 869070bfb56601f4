//! Sniffers and trace files: packets to pcap/pcapng captures in each sniffer's clock, or
//! messages to a message-trace CSV.
//!
//! Every output keeps a heap of records not yet written and writes those older than the
//! generation frontier (the start of the next instance, less a margin): instances are
//! generated in start order and every record of an instance lies after its start, so files
//! come out in timestamp order while memory holds only what is in flight.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder};
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;

use super::config::Transport;
use super::net::PacketDesc;
use super::sim::Host;

/// A node's clock: local = true × (1 + drift) + offset, all in ns relative to the trace start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock {
    /// Offset in ns.
    pub offset_ns: f64,
    /// Drift in ppm.
    pub drift_ppm: f64,
}

impl Clock {
    /// Local reading at true time `t`.
    pub fn local(&self, t: f64) -> f64 {
        t * (1.0 + self.drift_ppm * 1e-6) + self.offset_ns
    }
}

/// Capture container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// Classic pcap, ns.
    Pcap,
    /// pcapng, ns.
    PcapNg,
}

enum FrameWriter {
    Pcap(PcapWriter<Box<dyn Write>>),
    PcapNg(PcapNgWriter<Box<dyn Write>>),
}

/// Opens `path` for writing, through gzip when asked.
fn create(path: &Path, gzip: bool) -> Result<Box<dyn Write>> {
    let file = File::create(path).with_context(|| format!("{}", path.display()))?;
    let buffered = BufWriter::with_capacity(1 << 20, file);
    Ok(if gzip {
        Box::new(flate2::write::GzEncoder::new(
            buffered,
            flate2::Compression::fast(),
        ))
    } else {
        Box::new(buffered)
    })
}

impl FrameWriter {
    fn open(path: &Path, container: Container, gzip: bool) -> Result<FrameWriter> {
        let out = create(path, gzip)?;
        Ok(match container {
            Container::Pcap => {
                let header = PcapHeader {
                    ts_resolution: pcap_file::TsResolution::NanoSecond,
                    datalink: DataLink::ETHERNET,
                    snaplen: 65_535,
                    endianness: pcap_file::Endianness::Little,
                    ..PcapHeader::default()
                };
                FrameWriter::Pcap(
                    PcapWriter::with_header(out, header)
                        .with_context(|| format!("{}", path.display()))?,
                )
            }
            Container::PcapNg => {
                let mut w =
                    PcapNgWriter::new(out).with_context(|| format!("{}", path.display()))?;
                let idb = InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen: 65_535,
                    options: vec![InterfaceDescriptionOption::IfTsResol(9)],
                };
                w.write_pcapng_block(idb)
                    .with_context(|| format!("{}", path.display()))?;
                FrameWriter::PcapNg(w)
            }
        })
    }

    fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<()> {
        let ts = Duration::from_nanos(ts_ns);
        match self {
            FrameWriter::Pcap(w) => {
                w.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame))?;
            }
            FrameWriter::PcapNg(w) => {
                let epb = EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: ts,
                    original_len: frame.len() as u32,
                    data: std::borrow::Cow::Borrowed(frame),
                    options: vec![],
                };
                w.write_pcapng_block(epb)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<()> {
        let mut inner = match self {
            FrameWriter::Pcap(w) => w.into_writer(),
            FrameWriter::PcapNg(w) => w.into_inner(),
        };
        inner.flush()?;
        Ok(())
    }
}

struct Sniffer {
    path: PathBuf,
    clock: Clock,
    writer: Option<FrameWriter>,
    heap: BinaryHeap<Reverse<Queued>>,
    written: u64,
}

/// A frame waiting in a sniffer's queue: local timestamp, packet id (tie-break), bytes.
type Queued = (u64, u64, Rc<[u8]>);

/// Where sniffers sit and how they see packets.
pub enum Placement {
    /// One mirror port sees each packet once, halfway along its link, in true time.
    Single,
    /// A sniffer per server node, in that node's clock (clients are not sniffed).
    PerHost,
}

/// The sniffers of a run.
pub struct Captures {
    sniffers: Vec<Sniffer>,
    placement: Placement,
    loss: f64,
    start_epoch_ns: u64,
    pool: Vec<u8>,
    ip_ids: std::collections::HashMap<Host, u16>,
    /// The IP id given to the last packet id (a forwarded hop keeps it).
    last_ip_id: (u64, u16),
    dropped: u64,
    /// Per generated message with data captured so far: whether a sniffer at the sender's
    /// side and one at the receiver's side captured any of its segments.
    pub sides: std::collections::HashMap<u64, Sides>,
}

/// Which sides of a message some sniffer captured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sides {
    /// A sniffer at the sender (its host's, or the mirror on its first hop).
    pub send: bool,
    /// A sniffer at the receiver.
    pub recv: bool,
}

/// One sniffer's output, for the summary.
pub struct SnifferSummary {
    /// File written.
    pub path: PathBuf,
    /// Packets in it.
    pub packets: u64,
}

/// `epoch + relative`, in integers so that nanoseconds survive (an f64 holds only about 256 ns
/// of precision at today's epoch times).
pub fn absolute(epoch_ns: u64, relative_ns: f64) -> u64 {
    if relative_ns.is_infinite() {
        return if relative_ns > 0.0 { u64::MAX } else { 0 };
    }
    epoch_ns.saturating_add_signed(relative_ns.round() as i64)
}

fn mac(ip: std::net::Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

impl Captures {
    /// Sniffers writing into `dir`: `mirror.pcap`, or one `<node>.pcap` per server node.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        placement: Placement,
        node_names: &[String],
        clocks: &[Clock],
        container: Container,
        gzip: bool,
        loss: f64,
        start_epoch_ns: u64,
        rng: &mut Xoshiro256PlusPlus,
    ) -> Result<Captures> {
        let ext = match (container, gzip) {
            (Container::Pcap, false) => "pcap",
            (Container::Pcap, true) => "pcap.gz",
            (Container::PcapNg, false) => "pcapng",
            (Container::PcapNg, true) => "pcapng.gz",
        };
        let specs: Vec<(String, Clock)> = match placement {
            Placement::Single => vec![("mirror".to_owned(), Clock::default())],
            Placement::PerHost => node_names
                .iter()
                .cloned()
                .zip(clocks.iter().copied())
                .collect(),
        };
        let mut sniffers = Vec::new();
        for (name, clock) in specs {
            let path = dir.join(format!("{name}.{ext}"));
            let writer = FrameWriter::open(&path, container, gzip)?;
            sniffers.push(Sniffer {
                path,
                clock,
                writer: Some(writer),
                heap: BinaryHeap::new(),
                written: 0,
            });
        }
        let mut pool = vec![0u8; 1 << 16];
        rng.fill(&mut pool[..]);
        Ok(Captures {
            sniffers,
            placement,
            loss,
            start_epoch_ns,
            pool,
            ip_ids: Default::default(),
            last_ip_id: (u64::MAX, 0),
            dropped: 0,
            sides: Default::default(),
        })
    }

    fn frame(&mut self, p: &PacketDesc) -> Rc<[u8]> {
        let ip_id = if p.first_hop || self.last_ip_id.0 != p.id {
            let id = self
                .ip_ids
                .entry(p.from)
                .or_insert((p.id as u16).wrapping_mul(7919));
            *id = id.wrapping_add(1);
            self.last_ip_id = (p.id, *id);
            *id
        } else {
            self.last_ip_id.1
        };
        let protocol = match p.transport {
            Transport::Tcp => IpNumber::TCP,
            Transport::Udp => IpNumber::UDP,
        };
        let mut ip = Ipv4Header::new(0, p.ttl, protocol, p.src.ip().octets(), p.dst.ip().octets())
            .unwrap_or_default();
        ip.identification = ip_id;
        let builder = PacketBuilder::ethernet2(mac(*p.src.ip()), mac(*p.dst.ip()))
            .ip(IpHeaders::Ipv4(ip, Default::default()));
        let len = p.payload_len as usize;
        let mut payload = Vec::with_capacity(len);
        if len > 0 {
            payload.extend_from_slice(&p.id.to_le_bytes()[..len.min(8)]);
            let rest = len.saturating_sub(8);
            let off = (p.id as usize).wrapping_mul(131)
                % (self.pool.len() - rest.min(self.pool.len() - 1));
            payload.extend_from_slice(&self.pool[off..off + rest.min(self.pool.len() - off)]);
            payload.resize(len, 0);
        }
        let mut out = Vec::with_capacity(14 + 20 + 20 + len);
        let written = match p.transport {
            Transport::Udp => builder
                .udp(p.src.port(), p.dst.port())
                .write(&mut out, &payload),
            Transport::Tcp => {
                let mut t = builder.tcp(p.src.port(), p.dst.port(), p.seq, 64_240);
                if p.flags & super::net::flags::SYN != 0 {
                    t = t.syn();
                }
                if p.flags & super::net::flags::FIN != 0 {
                    t = t.fin();
                }
                if p.flags & super::net::flags::PSH != 0 {
                    t = t.psh();
                }
                if p.flags & super::net::flags::ACK != 0 {
                    t = t.ack(p.ack);
                }
                t.write(&mut out, &payload)
            }
        };
        if written.is_err() {
            out.clear();
        }
        out.into()
    }

    /// Queues the copies of `packets` that the sniffers see, and notes in [`Captures::sides`]
    /// which sides of their messages were captured.
    pub fn add(&mut self, packets: &[PacketDesc], rng: &mut Xoshiro256PlusPlus) {
        for p in packets {
            let frame = self.frame(p);
            if frame.is_empty() {
                continue;
            }
            let (mut send, mut recv) = (false, false);
            match self.placement {
                Placement::Single => {
                    let t = (p.leave_ns + p.arrive_ns) / 2.0;
                    let seen = self.queue(0, t, p.id, &frame, rng);
                    send = seen && p.first_hop;
                    recv = seen && p.last_hop;
                }
                Placement::PerHost => {
                    if let Host::Server(n) = p.from {
                        send = self.queue(n as usize, p.leave_ns, p.id, &frame, rng) && p.first_hop;
                    }
                    if let Host::Server(n) = p.to {
                        recv = self.queue(n as usize, p.arrive_ns, p.id, &frame, rng) && p.last_hop;
                    }
                }
            }
            if let Some(m) = p.message {
                let sides = self.sides.entry(m).or_default();
                sides.send |= send;
                sides.recv |= recv;
            }
        }
    }

    fn queue(
        &mut self,
        sniffer: usize,
        true_ns: f64,
        id: u64,
        frame: &Rc<[u8]>,
        rng: &mut Xoshiro256PlusPlus,
    ) -> bool {
        if self.loss > 0.0 && rng.random::<f64>() < self.loss {
            self.dropped += 1;
            return false;
        }
        let s = &mut self.sniffers[sniffer];
        let ts = absolute(self.start_epoch_ns, s.clock.local(true_ns));
        s.heap.push(Reverse((ts, id, Rc::clone(frame))));
        true
    }

    /// Writes every queued copy older than true time `frontier`.
    pub fn flush(&mut self, frontier: f64) -> Result<()> {
        for s in &mut self.sniffers {
            let limit = absolute(self.start_epoch_ns, s.clock.local(frontier));
            while let Some(Reverse((ts, _, _))) = s.heap.peek() {
                if *ts >= limit {
                    break;
                }
                let Some(Reverse((ts, _, frame))) = s.heap.pop() else {
                    break;
                };
                if let Some(w) = s.writer.as_mut() {
                    w.write(ts, &frame)
                        .with_context(|| format!("{}", s.path.display()))?;
                }
                s.written += 1;
            }
        }
        Ok(())
    }

    /// Writes everything left and closes the files.
    pub fn finish(mut self) -> Result<(Vec<SnifferSummary>, u64)> {
        self.flush(f64::INFINITY)?;
        let mut out = Vec::new();
        for s in self.sniffers {
            if let Some(w) = s.writer {
                w.finish()
                    .with_context(|| format!("{}", s.path.display()))?;
            }
            out.push(SnifferSummary {
                path: s.path,
                packets: s.written,
            });
        }
        Ok((out, self.dropped))
    }
}

/// How a message trace names the two ends of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// An `ip:port` endpoint.
    Endpoint(SocketAddrV4),
    /// A node's name (shared by every row of the node).
    Name(Rc<str>),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Endpoint(e) => e.fmt(f),
            End::Name(n) => f.write_str(n),
        }
    }
}

/// One row of a message trace, waiting for its turn.
pub struct Row {
    /// Event time used for ordering: send time, or receive time when the send side is lost.
    pub ts: u64,
    /// Global message id.
    pub id: u64,
    /// Send time in the sender's clock.
    pub send_ns: Option<u64>,
    /// Receive time in the receiver's clock.
    pub recv_ns: Option<u64>,
    /// Sender.
    pub src: End,
    /// Receiver.
    pub dst: End,
    /// Size.
    pub bytes: u32,
    /// `call` or `return`, and the id that pairs a call with its return; `None` when the
    /// trace has no `kind` and `call_id` columns.
    pub kind: Option<(&'static str, String)>,
}

impl PartialEq for Row {
    fn eq(&self, o: &Self) -> bool {
        (self.ts, self.id) == (o.ts, o.id)
    }
}
impl Eq for Row {}
impl PartialOrd for Row {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Row {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.ts, self.id).cmp(&(o.ts, o.id))
    }
}

/// A message-trace CSV in event-time order.
pub struct TraceCsv {
    path: PathBuf,
    out: Box<dyn Write>,
    heap: BinaryHeap<Reverse<Row>>,
    rows: u64,
}

impl TraceCsv {
    /// Creates `dir/messages.csv` (or `.csv.gz`), with the `kind` and `call_id` columns when
    /// `kind` holds.
    pub fn open(dir: &Path, gzip: bool, kind: bool) -> Result<TraceCsv> {
        let path = dir.join(if gzip {
            "messages.csv.gz"
        } else {
            "messages.csv"
        });
        let mut out = create(&path, gzip)?;
        let header = if kind {
            "send_ns,recv_ns,src,dst,bytes,kind,call_id"
        } else {
            "send_ns,recv_ns,src,dst,bytes"
        };
        writeln!(out, "{header}").with_context(|| format!("{}", path.display()))?;
        Ok(TraceCsv {
            path,
            out,
            heap: BinaryHeap::new(),
            rows: 0,
        })
    }

    /// Queues a row.
    pub fn add(&mut self, row: Row) {
        self.heap.push(Reverse(row));
    }

    /// Writes rows with event time before `limit`; reports each written message id with its row.
    pub fn flush(&mut self, limit: u64, mut written: impl FnMut(u64, u64)) -> Result<()> {
        while let Some(Reverse(r)) = self.heap.peek() {
            if r.ts >= limit {
                break;
            }
            let Some(Reverse(r)) = self.heap.pop() else {
                break;
            };
            let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
            match &r.kind {
                Some((kind, call_id)) => writeln!(
                    self.out,
                    "{},{},{},{},{},{kind},{call_id}",
                    opt(r.send_ns),
                    opt(r.recv_ns),
                    r.src,
                    r.dst,
                    r.bytes,
                ),
                None => writeln!(
                    self.out,
                    "{},{},{},{},{}",
                    opt(r.send_ns),
                    opt(r.recv_ns),
                    r.src,
                    r.dst,
                    r.bytes,
                ),
            }
            .with_context(|| format!("{}", self.path.display()))?;
            written(r.id, self.rows);
            self.rows += 1;
        }
        Ok(())
    }

    /// Writes everything left.
    pub fn finish(mut self, written: impl FnMut(u64, u64)) -> Result<(PathBuf, u64)> {
        self.flush(u64::MAX, written)?;
        self.out.flush()?;
        Ok((self.path, self.rows))
    }
}
