//! Spill files: what a traced process had buffered and not yet written to its log when it
//! died, recovered into the log.
//!
//! The preload library keeps each thread's buffer of records in `<log>.spill`, a file it maps
//! shared (`MAP_SHARED`), not in its own memory: the kernel keeps those pages when the process
//! is killed (SIGKILL, the OOM killer, a crash) or ends without running its exit handlers
//! (SIGTERM without a handler). A process that exits cleanly writes out its buffers and removes
//! the file; a spill file found beside a log whose writer is gone holds the records that the
//! log is missing. [`drain`] appends them to the log and removes the spill file; `causeway
//! capture` does so when the program it ran ends, and reading a capture directory does so for
//! logs whose writer is gone. A drain claims the spill file by renaming it to
//! `<log>.spill.<pid>` first, so that drains running at once append its records once; a
//! drain that dies part way leaves that file (the records it appended are then found in the
//! log by a later look, which this version does not make).
//!
//! # Format, version 1
//!
//! Little-endian. A 64-byte header: magic `CWSPILL\x01`, then the slot count, the bytes per
//! slot and the header's length (u32 each), zeros to 64. Then the slots, one per thread
//! buffer: the committed length (u32: the bytes of whole records in the buffer), four
//! reserved bytes, and the buffer, records as in a log. The writer stores a record's bytes,
//! then the committed length that covers them (a release store), so a record half-written at
//! the moment of death is not covered, and never read.
//!
//! # Recovery
//!
//! A buffer's records may already be in the log: the process died after writing them out and
//! before emptying the buffer, or in the middle of that write (the kernel may stop a write to
//! a regular file part way on a fatal signal). So [`drain`] first cuts a record the log ends
//! inside of, then, per buffer, skips one whose bytes the log's end already holds, appends
//! the rest of one whose first records end the log, and appends any other whole.
//!
//! State: none kept; a drain reads the spill file (sparse: only the pages of buffers that
//! were used hold data) and the last 16 MiB of the log.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::LogError;
use crate::header::LogHeader;
use crate::reader::Reader;
use crate::record::{self, RecordView};

/// The spill file's magic and version.
pub const MAGIC: [u8; 8] = *b"CWSPILL\x01";
/// The suffix of a spill file's name: `<log>.spill`.
pub const SUFFIX: &str = ".spill";
/// How far back from its end the log is searched for a buffer already written.
const TAIL: u64 = 16 << 20;

/// What [`drain`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records appended to the log.
    pub records: u64,
    /// Bytes appended to the log.
    pub bytes: u64,
    /// Buffers found already written to the log (not appended again).
    pub already_written: u64,
    /// Bytes of a record the log ended inside of, cut off before appending.
    pub cut: u64,
    /// Bytes of a spill buffer that were not whole records, skipped.
    pub skipped: u64,
}

impl Drained {
    /// Adds another drain's counts.
    pub fn add(&mut self, o: &Drained) {
        self.records += o.records;
        self.bytes += o.bytes;
        self.already_written += o.already_written;
        self.cut += o.cut;
        self.skipped += o.skipped;
    }
}

/// The spill file of the log at `log`.
pub fn spill_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(SUFFIX);
    PathBuf::from(p)
}

/// Whether the process that writes a log is running: on this host, a process with its pid
/// and start time exists and is not a zombie (it has exited, and its parent not yet
/// reaped it). A log from another host is taken as finished.
pub fn writer_alive(header: &LogHeader) -> bool {
    let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
        return false;
    };
    if host.trim_end() != header.hostname {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", header.pid)) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_ascii_whitespace().next());
            !matches!(state, Some("Z" | "X"))
                && (header.start_ticks == 0
                    || crate::proc_start_ticks(&stat).is_none_or(|t| t == header.start_ticks))
        }
    }
}

/// Recovers the records of `log`'s spill file into the log, and removes the spill file, if
/// there is one and the log's writer is gone (`Ok(None)` otherwise).
pub fn drain(log: &Path) -> Result<Option<Drained>, LogError> {
    let found = spill_path(log);
    if !found.exists() {
        return Ok(None);
    }
    let name = log.display().to_string();
    let open_err = |file: &Path| {
        let file = file.display().to_string();
        move |source| LogError::Open { file, source }
    };
    let file = File::open(log).map_err(open_err(log))?;
    let read_len = file.metadata().map_or(0, |m| m.len());
    let mut reader = Reader::new(BufReader::new(file), name.clone())?;
    if writer_alive(reader.header()) {
        return Ok(None);
    }
    // Claimed by renaming it: of several drains at once (two `causeway capture` commands
    // whose programs end together, an analysis), one appends, the others find it gone.
    let mut spill = found.clone().into_os_string();
    spill.push(format!(".{}", std::process::id()));
    let spill = PathBuf::from(spill);
    match std::fs::rename(&found, &spill) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_err(&found)(e)),
    }
    let mut bytes = Vec::new();
    File::open(&spill)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(open_err(&spill))?;
    let (blocks, skipped) = buffers(&bytes, &spill)?;
    let mut done = Drained {
        skipped,
        ..Drained::default()
    };

    // Where the log's last whole record ends; a record cut short after it goes.
    let end = whole_records_end(&mut reader, read_len)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(log)
        .map_err(open_err(log))?;
    let len = file.metadata().map_err(open_err(log))?.len();
    let io_err = |offset: u64| {
        let file = name.clone();
        move |source| LogError::Io {
            file,
            offset,
            source,
        }
    };
    if end < len {
        file.set_len(end).map_err(io_err(end))?;
        done.cut = len - end;
    }
    let from = end.saturating_sub(TAIL);
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(from))
        .and_then(|_| {
            Read::by_ref(&mut file)
                .take(end - from)
                .read_to_end(&mut tail)
        })
        .map_err(io_err(from))?;
    file.seek(SeekFrom::End(0)).map_err(io_err(end))?;
    for block in blocks {
        if memchr::memmem::find(&tail, block).is_some() {
            done.already_written += 1;
            continue;
        }
        // The first records of the block may end the log: a write cut short.
        let starts = record_starts(block);
        let written = starts
            .iter()
            .rev()
            .find(|&&k| k > 0 && tail.ends_with(&block[..k]))
            .copied()
            .unwrap_or(0);
        let rest = &block[written..];
        file.write_all(rest).map_err(io_err(end))?;
        done.bytes += rest.len() as u64;
        done.records += starts.iter().filter(|&&k| k >= written).count() as u64;
    }
    file.sync_data().map_err(io_err(end))?;
    std::fs::remove_file(&spill).map_err(open_err(&spill))?;
    Ok(Some(done))
}

/// Drains the spill file of every log in `dir` whose writer is gone; the counts summed, and
/// how many logs had one.
pub fn drain_dir(dir: &Path) -> Result<(Drained, usize), LogError> {
    let mut total = Drained::default();
    let mut logs = 0;
    for log in crate::dir::read_dir(dir)? {
        if let Some(d) = drain(&log.path)? {
            total.add(&d);
            logs += 1;
        }
    }
    Ok((total, logs))
}

/// The buffers of the spill file `spill` whose contents are `bytes`: each slot's committed
/// records, whole and valid records only; and the bytes of committed records skipped as not
/// whole or not valid.
pub fn buffers<'a>(bytes: &'a [u8], spill: &Path) -> Result<(Vec<&'a [u8]>, u64), LogError> {
    let u32_at = |at: usize| {
        bytes
            .get(at..at.checked_add(4)?)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let bad = |what: &str| LogError::Open {
        file: spill.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
    };
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(bad("not a spill file (bad magic)"));
    }
    let (Some(slots), Some(slot_bytes), Some(head)) = (u32_at(8), u32_at(12), u32_at(16)) else {
        return Err(bad("spill header cut short"));
    };
    if slot_bytes <= 8 || head < 20 {
        return Err(bad("spill header out of range"));
    }
    let mut out = Vec::new();
    let mut skipped = 0u64;
    for i in 0..slots {
        let Some(at) = i.checked_mul(slot_bytes).and_then(|o| o.checked_add(head)) else {
            break;
        };
        let Some(committed) = u32_at(at) else {
            break;
        };
        if committed == 0 {
            continue;
        }
        let data = at
            .checked_add(8)
            .and_then(|from| bytes.get(from..from.checked_add(committed.min(slot_bytes - 8))?));
        let Some(data) = data else {
            skipped += committed as u64;
            continue;
        };
        let whole = record_starts(data)
            .last()
            .map_or(0, |&k| k + record_len(&data[k..]));
        skipped += (committed - whole) as u64;
        if whole > 0 {
            out.push(&data[..whole]);
        }
    }
    Ok((out, skipped))
}

/// The length field of the record at the start of `b` (0 if `b` is too short).
fn record_len(b: &[u8]) -> usize {
    b.get(..2)
        .map_or(0, |l| u16::from_le_bytes([l[0], l[1]]) as usize)
}

/// The offsets of the whole, valid records at the start of `b`, up to the first that is not.
fn record_starts(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(rest) = b.get(at..) {
        let len = record_len(rest);
        if len < record::HEADER_LEN || len > rest.len() {
            break;
        }
        if RecordView::new_unchecked(&rest[..len]).check().is_err() {
            break;
        }
        out.push(at);
        at += len;
    }
    out
}

/// The offset just past the last whole record of the log `r` reads (of `len` bytes).
fn whole_records_end<R: Read>(r: &mut Reader<R>, len: u64) -> Result<u64, LogError> {
    loop {
        match r.next_view() {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(r.offset()),
            // Only a record the log ends inside of is cut; other damage is left as it is.
            Err(LogError::Truncated { offset, .. }) => return Ok(offset),
            Err(LogError::Malformed { .. }) => return Ok(len),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Record, Syscall, Writer};

    /// A log of a process on another host (so taken as gone) with `n` records.
    fn log_of(n: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
        let header = LogHeader {
            hostname: "elsewhere".into(),
            pid: 7,
            ..Default::default()
        };
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        for i in 0..n {
            w.write(&Record::new(Syscall::Write, 1_000 + i, 7, 5, 64))
                .unwrap();
        }
        let recs = (0..4)
            .map(|i| {
                Record::new(Syscall::Read, 9_000 + i, 8, 6, 32)
                    .to_bytes()
                    .unwrap()
            })
            .collect();
        (w.into_inner(), recs)
    }

    /// A spill file whose slot 1 holds `block` (committed) followed by `junk` (not committed).
    fn spill_of(block: &[u8], junk: &[u8]) -> Vec<u8> {
        let (slots, slot_bytes, head) = (4usize, 8 + 1024usize, 64usize);
        let mut s = vec![0u8; head + slots * slot_bytes];
        s[..8].copy_from_slice(&MAGIC);
        s[8..12].copy_from_slice(&(slots as u32).to_le_bytes());
        s[12..16].copy_from_slice(&(slot_bytes as u32).to_le_bytes());
        s[16..20].copy_from_slice(&(head as u32).to_le_bytes());
        let at = head + slot_bytes;
        s[at..at + 4].copy_from_slice(&(block.len() as u32).to_le_bytes());
        s[at + 8..at + 8 + block.len()].copy_from_slice(block);
        s[at + 8 + block.len()..at + 8 + block.len() + junk.len()].copy_from_slice(junk);
        s
    }

    fn read_all(path: &Path) -> Vec<Record> {
        crate::open(path)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    fn run(log: &[u8], spill: &[u8]) -> (Drained, Vec<Record>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("elsewhere.7.0.cwlog");
        std::fs::write(&path, log).unwrap();
        std::fs::write(spill_path(&path), spill).unwrap();
        let d = drain(&path).unwrap().expect("drained");
        (d, read_all(&path), spill_path(&path).exists())
    }

    #[test]
    fn buffered_records_are_appended_once_and_the_spill_removed() {
        let (log, recs) = log_of(3);
        let block = recs.concat();
        let (d, got, left) = run(&log, &spill_of(&block, &recs[0][..10]));
        assert_eq!(d.records, 4);
        assert_eq!(d.bytes, block.len() as u64);
        assert!(!left);
        assert_eq!(got.len(), 7);
        assert_eq!(got.iter().filter(|r| r.syscall == Syscall::Read).count(), 4);
    }

    #[test]
    fn a_buffer_already_written_is_not_appended_again() {
        let (mut log, recs) = log_of(3);
        let block = recs.concat();
        log.extend_from_slice(&block);
        let (d, got, _) = run(&log, &spill_of(&block, &[]));
        assert_eq!((d.records, d.already_written), (0, 1));
        assert_eq!(got.len(), 7);
    }

    #[test]
    fn a_write_cut_short_is_completed_not_repeated() {
        // Killed while writing the buffer out: two records and half the third made it.
        let (mut log, recs) = log_of(3);
        let block = recs.concat();
        let cut = recs[0].len() + recs[1].len() + recs[2].len() / 2;
        log.extend_from_slice(&block[..cut]);
        let (d, got, _) = run(&log, &spill_of(&block, &[]));
        assert_eq!(d.cut, (recs[2].len() / 2) as u64);
        assert_eq!(d.records, 2);
        assert_eq!(got.len(), 7);
        let times: Vec<u64> = got.iter().map(|r| r.time_ns).collect();
        assert_eq!(times, [1_000, 1_001, 1_002, 9_000, 9_001, 9_002, 9_003]);
    }

    #[test]
    fn the_spill_of_a_running_writer_is_left_alone() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let header = LogHeader {
            hostname: host.trim_end().into(),
            pid: std::process::id(),
            start_ticks: crate::proc_start_ticks(&stat).unwrap(),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("me.1.0.cwlog");
        std::fs::write(
            &path,
            Writer::new(Vec::new(), &header).unwrap().into_inner(),
        )
        .unwrap();
        std::fs::write(spill_path(&path), spill_of(&[], &[])).unwrap();
        assert_eq!(drain(&path).unwrap(), None);
        assert!(spill_path(&path).exists());
    }
}
