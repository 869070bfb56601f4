//! `--write FILE`: what the live sniffer captured, saved as pcapng while it is analysed.
//!
//! - **Input**: every frame the sniffer read from its ring (non-IP frames and frames the
//!   analysis skips included), with the link-layer header the sniffer gives it (Ethernet, or
//!   a Linux cooked v2 header for `any`), its capture time and its length on the wire. Frames
//!   read from the ring together with the last one a stopped run analysed are in the file
//!   too (the run counts them as skipped, `stopped`).
//! - **Output**: a pcapng file, little-endian: a section header (`shb_userappl` names
//!   causeway), one interface description (link type, snap length, `if_name`, `if_filter`,
//!   `if_tsresol` 9: nanosecond timestamps), an enhanced packet block per frame and, when the
//!   capture ends, an interface statistics block (start and end time, packets the kernel
//!   received and dropped, packets written). tshark, capinfos and `causeway analyze` read it.
//! - **When**: blocks go through a 256 KiB buffer, flushed after each batch the sniffer reads
//!   (so a `tail -f` or a crash loses at most one batch) and at the end.
//! - **State**: the buffer. **Cost**: one copy of each frame into the buffer.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::Endianness;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::RawBlock;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};

/// Block type of an interface statistics block.
const ISB: u32 = 5;

/// A pcapng file being written by a live sniffer.
pub struct CaptureWriter {
    writer: PcapNgWriter<BufWriter<File>>,
    path: PathBuf,
    written: u64,
}

impl std::fmt::Debug for CaptureWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureWriter")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish()
    }
}

/// What the interface statistics block at the end of the file says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureTotals {
    /// When the capture started, ns since the epoch.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// Packets the kernel passed to the socket (dropped ones included).
    pub received: u64,
    /// Packets the kernel dropped because the ring was full.
    pub dropped: u64,
}

fn io_error(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

impl CaptureWriter {
    /// Creates `path` (replacing it) and writes the section header and the interface
    /// description.
    pub fn create(
        path: &Path,
        linktype: u16,
        snaplen: u32,
        interface: &str,
        filter: Option<&str>,
    ) -> io::Result<CaptureWriter> {
        let file = File::create(path)?;
        let section = SectionHeaderBlock {
            endianness: Endianness::Little,
            options: vec![SectionHeaderOption::UserApplication(Cow::Owned(format!(
                "causeway {}",
                env!("CARGO_PKG_VERSION")
            )))],
            ..SectionHeaderBlock::default()
        };
        let mut writer =
            PcapNgWriter::with_section_header(BufWriter::with_capacity(256 << 10, file), section)
                .map_err(io_error)?;
        let mut options = vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(interface.to_owned())),
            InterfaceDescriptionOption::IfTsResol(9),
        ];
        if let Some(f) = filter {
            // Type 0: a libpcap filter string.
            let mut v = vec![0u8];
            v.extend_from_slice(f.as_bytes());
            options.push(InterfaceDescriptionOption::IfFilter(Cow::Owned(v)));
        }
        writer
            .write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::from(u32::from(linktype)),
                snaplen,
                options,
            })
            .map_err(io_error)?;
        let mut w = CaptureWriter {
            writer,
            path: path.to_owned(),
            written: 0,
        };
        w.flush()?;
        Ok(w)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends one frame.
    pub fn write(&mut self, ts_ns: u64, wire_len: u32, frame: &[u8]) -> io::Result<()> {
        self.writer
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(ts_ns),
                original_len: wire_len.max(frame.len() as u32),
                data: Cow::Borrowed(frame),
                options: vec![],
            })
            .map_err(io_error)?;
        self.written += 1;
        Ok(())
    }

    /// Pushes what is buffered to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.get_mut().flush()
    }

    /// Appends the interface statistics block and flushes.
    pub fn finish(&mut self, totals: CaptureTotals) -> io::Result<()> {
        // Written by hand: a pcapng timestamp is two 32-bit words, high first, which
        // pcap-file 2.0 writes as one 64-bit integer (the wrong way round in little-endian).
        let mut body = Vec::with_capacity(96);
        let time = |b: &mut Vec<u8>, ns: u64| {
            b.extend_from_slice(&((ns >> 32) as u32).to_le_bytes());
            b.extend_from_slice(&(ns as u32).to_le_bytes());
        };
        body.extend_from_slice(&0u32.to_le_bytes());
        time(&mut body, totals.end_ns);
        let option = |b: &mut Vec<u8>, code: u16, value: [u8; 8]| {
            b.extend_from_slice(&code.to_le_bytes());
            b.extend_from_slice(&8u16.to_le_bytes());
            b.extend_from_slice(&value);
        };
        let mut t = Vec::new();
        time(&mut t, totals.start_ns);
        option(&mut body, 2, t.clone().try_into().unwrap_or([0; 8])); // isb_starttime
        t.clear();
        time(&mut t, totals.end_ns);
        option(&mut body, 3, t.try_into().unwrap_or([0; 8])); // isb_endtime
        option(&mut body, 4, totals.received.to_le_bytes()); // isb_ifrecv
        option(&mut body, 5, totals.dropped.to_le_bytes()); // isb_ifdrop
        option(&mut body, 8, self.written.to_le_bytes()); // isb_usrdeliv
        body.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
        let len = 12 + body.len() as u32;
        self.writer
            .write_raw_block(&RawBlock {
                type_: ISB,
                initial_len: len,
                body: Cow::Owned(body),
                trailer_len: len,
            })
            .map_err(io_error)?;
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcap::FrameReader;
    use crate::stats::SourceStats;

    #[test]
    fn written_frames_read_back_with_their_times_and_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cap.pcapng");
        let mut w = CaptureWriter::create(&path, 276, 262_144, "any", Some("tcp port 80")).unwrap();
        w.write(1_700_000_000_123_456_789, 1500, b"abcdef").unwrap();
        w.write(1_700_000_001_000_000_001, 7, b"xyz").unwrap();
        w.flush().unwrap();
        // Readable before the end: flushed as it goes.
        let read = |path: &Path| {
            let mut r = FrameReader::new(File::open(path).unwrap()).unwrap();
            let (mut stats, mut damage) = (SourceStats::default(), Vec::new());
            let mut out = Vec::new();
            while let Some(f) = r.next_frame(&mut stats, &mut damage).unwrap() {
                out.push((f.ts_ns, f.linktype, f.wire_len, f.data.to_vec()));
            }
            (out, stats, damage)
        };
        let (frames, _, damage) = read(&path);
        assert!(damage.is_empty(), "{damage:?}");
        assert_eq!(frames.len(), 2);
        w.finish(CaptureTotals {
            start_ns: 1_700_000_000_000_000_000,
            end_ns: 1_700_000_002_000_000_000,
            received: 3,
            dropped: 1,
        })
        .unwrap();
        let (frames, stats, damage) = read(&path);
        assert!(damage.is_empty(), "{damage:?}");
        assert_eq!(stats.skipped_total(), 0, "{stats:?}");
        assert_eq!(
            frames,
            vec![
                (1_700_000_000_123_456_789, 276, 1500, b"abcdef".to_vec()),
                (1_700_000_001_000_000_001, 276, 7, b"xyz".to_vec()),
            ]
        );
        // The statistics block, byte for byte after its header: interface 0, end time
        // (high, low), then the options.
        let bytes = std::fs::read(&path).unwrap();
        let isb = bytes.len() - (12 + 4 + 8 + 5 * 12 + 4);
        assert_eq!(&bytes[isb..isb + 4], &5u32.to_le_bytes());
        let end: u64 = 1_700_000_002_000_000_000;
        assert_eq!(
            &bytes[isb + 12..isb + 16],
            &((end >> 32) as u32).to_le_bytes()
        );
        assert_eq!(&bytes[isb + 16..isb + 20], &(end as u32).to_le_bytes());
        let drop_opt = isb + 20 + 3 * 12;
        assert_eq!(&bytes[drop_opt..drop_opt + 4], &[5, 0, 8, 0]);
        assert_eq!(&bytes[drop_opt + 4..drop_opt + 12], &1u64.to_le_bytes());
    }
}
