//! [`ObservationReader`]: one input (a capture or a message trace) turned into observations.
//!
//! A reader owns its stream and counts what it reads into its own [`SourceStats`]; the source
//! operator takes those counts and its warnings as deltas and sends them on as data.

use std::io::Read;

use crate::decode::{DecodeOptions, IpVersion, decode};
use crate::observation::{Batch, Nanos, Protocol};
use crate::origin::OriginId;
use crate::pcap::{Damage, FrameReader};
use crate::stats::SourceStats;
use crate::trace::TraceReader;
use crate::{Warning, warning_limit};

/// A stream of observations from one input.
pub trait ObservationReader: Send {
    /// The origin (clock domain) of everything this reader emits.
    fn origin(&self) -> OriginId;
    /// Appends up to `max` observations to `out` (to the vector of its kind), in the order the
    /// input holds them. Returns false once the input is exhausted (what was appended in that
    /// call still counts).
    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool;
    /// Makes room in `out` for `max` observations of this reader's kind.
    fn reserve(&self, max: usize, out: &mut Batch);
    /// Counts since the last call.
    fn take_stats(&mut self) -> SourceStats;
    /// Warnings since the last call.
    fn take_warnings(&mut self) -> Vec<Warning>;
    /// Whether `read_batch` may return nothing for a while without the input having ended
    /// (a live source): the source operator then asks once per activation instead of until
    /// it gets records, so that the rest of the dataflow keeps running meanwhile.
    fn is_live(&self) -> bool {
        false
    }
    /// For a live reader whose records are stamped by the host's clock as they are made: that
    /// clock now (ns since the epoch). No record it sends later is older, so the watermark can
    /// follow it while the input is quiet (a poller with no sockets to report, say).
    fn clock_now(&self) -> Option<Nanos> {
        None
    }
}

/// Shared bookkeeping of the readers: counts, warnings with a cap on how many are spelled
/// out, and the input's name for messages.
pub(crate) struct Ledger {
    pub(crate) origin: OriginId,
    pub(crate) path: String,
    pub(crate) stats: SourceStats,
    pub(crate) warnings: Vec<Warning>,
    pub(crate) damage: Vec<Damage>,
    shown: usize,
    suppressed: u64,
}

impl Ledger {
    pub(crate) fn new(origin: OriginId, path: &str, format: &str) -> Self {
        let mut stats = SourceStats::default();
        stats.formats.insert(format.to_owned(), 1);
        Ledger {
            origin,
            path: path.to_owned(),
            stats,
            warnings: Vec::new(),
            damage: Vec::new(),
            shown: 0,
            suppressed: 0,
        }
    }

    /// Turns damage reports into warnings, spelling out the first [`warning_limit`] only.
    pub(crate) fn drain_damage(&mut self) {
        for d in self.damage.drain(..) {
            if self.shown < warning_limit() {
                self.shown += 1;
                self.warnings.push(Warning {
                    origin: self.origin,
                    path: self.path.clone(),
                    offset: Some(d.offset),
                    message: d.message,
                });
            } else {
                self.suppressed += 1;
            }
        }
    }

    pub(crate) fn io_error(&mut self, offset: u64, e: std::io::Error) {
        self.warnings.push(Warning {
            origin: self.origin,
            path: self.path.clone(),
            offset: Some(offset),
            message: format!("read error, stopped reading: {e}"),
        });
    }

    pub(crate) fn finish(&mut self) {
        self.drain_damage();
        if self.suppressed > 0 {
            self.warnings.push(Warning {
                origin: self.origin,
                path: self.path.clone(),
                offset: None,
                message: format!(
                    "{} more damaged records not shown (counted in stats)",
                    self.suppressed
                ),
            });
            self.suppressed = 0;
        }
    }
}

/// Decodes `frame` into `out` and counts it in `stats`: its protocol and IP version, or why
/// it was skipped. Returns whether it became a packet. Shared by every packet reader.
pub(crate) fn decode_counted(
    frame: &crate::pcap::Frame<'_>,
    origin: OriginId,
    options: DecodeOptions,
    stats: &mut SourceStats,
    out: &mut Batch,
) -> bool {
    match decode(frame, origin, options) {
        Ok((packet, version)) => {
            match packet.protocol {
                Protocol::Tcp => stats.tcp += 1,
                Protocol::Udp => stats.udp += 1,
            }
            if version == IpVersion::V6 {
                stats.ipv6 += 1;
            }
            out.packets.push(packet);
            true
        }
        Err(reason) => {
            stats.skip(reason);
            false
        }
    }
}

/// Packets from a pcap or pcapng stream.
pub struct PacketReader<R> {
    frames: FrameReader<R>,
    options: DecodeOptions,
    ledger: Ledger,
    done: bool,
}

impl<R: Read + Send> PacketReader<R> {
    /// A reader over an opened capture.
    pub fn new(
        frames: FrameReader<R>,
        origin: OriginId,
        path: &str,
        options: DecodeOptions,
    ) -> Self {
        let ledger = Ledger::new(origin, path, frames.format_name());
        PacketReader {
            frames,
            options,
            ledger,
            done: false,
        }
    }
}

impl<R: Read + Send> ObservationReader for PacketReader<R> {
    fn origin(&self) -> OriginId {
        self.ledger.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.packets.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if self.done {
            return false;
        }
        let origin = self.ledger.origin;
        let stats = &mut self.ledger.stats;
        // Count link types locally and fold them into the map once per run of equal types.
        let mut linktype: Option<(u16, u64)> = None;
        let mut produced = 0;
        let mut finished = false;
        let mut failed = None;
        while produced < max {
            let frame = match self.frames.next_frame(stats, &mut self.ledger.damage) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    finished = true;
                    break;
                }
                Err(e) => {
                    failed = Some(e);
                    finished = true;
                    break;
                }
            };
            stats.record(frame.ts_ns, frame.wire_len as u64);
            match &mut linktype {
                Some((lt, n)) if *lt == frame.linktype => *n += 1,
                _ => {
                    if let Some((lt, n)) = linktype.take() {
                        *stats.linktypes.entry(lt).or_default() += n;
                    }
                    linktype = Some((frame.linktype, 1));
                }
            }
            if decode_counted(&frame, origin, self.options, stats, out) {
                produced += 1;
            }
        }
        if let Some((lt, n)) = linktype {
            *stats.linktypes.entry(lt).or_default() += n;
        }
        if let Some(e) = failed {
            let at = self.frames.position();
            self.ledger.io_error(at, e);
        }
        if finished {
            self.done = true;
            self.ledger.finish();
        } else {
            self.ledger.drain_damage();
        }
        !finished
    }

    fn take_stats(&mut self) -> SourceStats {
        self.ledger.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.ledger.warnings)
    }
}

/// Rows of a message trace.
pub struct RowReader<R: Read> {
    rows: TraceReader<R>,
    ledger: Ledger,
    done: bool,
}

impl<R: Read + Send> RowReader<R> {
    /// A reader over an opened message trace.
    pub fn new(rows: TraceReader<R>, origin: OriginId, path: &str) -> Self {
        RowReader {
            rows,
            ledger: Ledger::new(origin, path, "message trace (csv)"),
            done: false,
        }
    }
}

impl<R: Read + Send> ObservationReader for RowReader<R> {
    fn origin(&self) -> OriginId {
        self.ledger.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.rows.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if self.done {
            return false;
        }
        let mut finished = false;
        for _ in 0..max {
            match self
                .rows
                .next_row(&mut self.ledger.stats, &mut self.ledger.damage)
            {
                Ok(Some(row)) => out.rows.push(row),
                Ok(None) => {
                    finished = true;
                    break;
                }
                Err(e) => {
                    let at = self.rows.position();
                    self.ledger.io_error(at, e);
                    finished = true;
                    break;
                }
            }
        }
        if finished {
            self.done = true;
            self.ledger.finish();
        } else {
            self.ledger.drain_damage();
        }
        !finished
    }

    fn take_stats(&mut self) -> SourceStats {
        self.ledger.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.ledger.warnings)
    }
}
