//! The webhook sink's on-disk queue: one file per alert in a directory, in order.
//!
//! An entry is written (to a `.tmp` file, then renamed) before any attempt to deliver it and
//! deleted once the receiver has taken it, so what the directory holds is exactly what is
//! still owed: a run that stops, however it stops, leaves its undelivered alerts there, and
//! the next run on the same directory sends them first. A file's name is
//! `<16-digit sequence>-<alert id>.json`: the sequence keeps the order across runs (a new run
//! continues after the highest one it finds), the id is the one the body carries. The body is
//! the exact request body.
//!
//! The queue is bounded by entries and bytes: [`DiskQueue::push`] refuses an alert that would
//! exceed either (the newest is the one dropped; the caller counts it). A `lock` file, held
//! with `flock` while the queue is open, keeps two runs from sending the same entries.
//!
//! Durability: entries survive the process (a crash, `kill -9`), not necessarily the machine
//! (files are not fsynced, so writing an alert costs a file create and a rename, no disk
//! flush).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

/// One queued alert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its file.
    pub path: PathBuf,
    /// Its alert id.
    pub id: String,
    /// Its size in bytes.
    pub bytes: u64,
}

/// A bounded FIFO of alerts in a directory; see the module documentation.
#[derive(Debug)]
pub struct DiskQueue {
    dir: PathBuf,
    _lock: File,
    entries: VecDeque<Entry>,
    bytes: u64,
    next: u64,
    max_entries: usize,
    max_bytes: u64,
}

impl DiskQueue {
    /// Opens (creating) the queue in `dir`, taking the entries a previous run left, in order.
    /// Fails if another process has it open.
    pub fn open(dir: &Path, max_entries: usize, max_bytes: u64) -> io::Result<DiskQueue> {
        fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        flock(&lock, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            io::Error::other(format!(
                "{}: in use by another process ({e})",
                dir.display()
            ))
        })?;
        let mut found = Vec::new();
        for item in fs::read_dir(dir)? {
            let item = item?;
            let name = item.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                // A write that a previous run did not finish: never queued, never acknowledged.
                let _ = fs::remove_file(item.path());
                continue;
            }
            let Some((seq, id)) = parse_name(name) else {
                continue;
            };
            let bytes = item.metadata()?.len();
            found.push((
                seq,
                Entry {
                    path: item.path(),
                    id: id.to_owned(),
                    bytes,
                },
            ));
        }
        found.sort_by_key(|(seq, _)| *seq);
        let next = found.last().map_or(0, |(seq, _)| seq + 1);
        let bytes = found.iter().map(|(_, e)| e.bytes).sum();
        Ok(DiskQueue {
            dir: dir.to_owned(),
            _lock: lock,
            entries: found.into_iter().map(|(_, e)| e).collect(),
            bytes,
            next,
            max_entries,
            max_bytes,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Entries queued.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes queued.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends an alert: `Ok(false)` (nothing written) when it would exceed a bound.
    pub fn push(&mut self, id: &str, body: &[u8]) -> io::Result<bool> {
        let size = body.len() as u64;
        if self.entries.len() >= self.max_entries || self.bytes + size > self.max_bytes {
            return Ok(false);
        }
        let name = format!("{:016}-{id}.json", self.next);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let written = File::create(&tmp)
            .and_then(|mut f| f.write_all(body))
            .and_then(|()| fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        self.next += 1;
        self.bytes += size;
        self.entries.push_back(Entry {
            path,
            id: id.to_owned(),
            bytes: size,
        });
        Ok(true)
    }

    /// The oldest entry.
    pub fn front(&self) -> Option<&Entry> {
        self.entries.front()
    }

    /// Removes the oldest entry and its file.
    pub fn pop_front(&mut self) -> io::Result<()> {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.bytes;
            match fs::remove_file(&e.path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        Ok(())
    }
}

/// `<sequence>-<id>.json` -> (sequence, id).
fn parse_name(name: &str) -> Option<(u64, &str)> {
    let stem = name.strip_suffix(".json")?;
    let (seq, id) = stem.split_once('-')?;
    (seq.len() == 16 && !id.is_empty())
        .then(|| seq.parse().ok())
        .flatten()
        .map(|s| (s, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("causeway-queue-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn entries_survive_a_reopen_in_order() {
        let d = dir("reopen");
        {
            let mut q = DiskQueue::open(&d, 10, 1 << 20).unwrap();
            for i in 0..3 {
                assert!(q.push(&format!("run-{i}"), b"{}").unwrap());
            }
            q.pop_front().unwrap();
            assert_eq!(q.len(), 2);
        }
        // A write the previous run did not finish is cleared, not queued.
        fs::write(d.join("0000000000000009-x.json.tmp"), b"{").unwrap();
        let mut q = DiskQueue::open(&d, 10, 1 << 20).unwrap();
        let ids: Vec<&str> = q.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["run-1", "run-2"]);
        assert_eq!(q.bytes(), 4);
        assert!(!d.join("0000000000000009-x.json.tmp").exists());
        // New entries go after the old ones.
        assert!(q.push("new-0", b"{}").unwrap());
        assert_eq!(q.entries.back().unwrap().id, "new-0");
        assert!(
            q.entries
                .back()
                .unwrap()
                .path
                .ends_with("0000000000000003-new-0.json")
        );
        q.pop_front().unwrap();
        assert_eq!(fs::read(&q.front().unwrap().path).unwrap(), b"{}");
        drop(q);
        fs::remove_dir_all(d).ok();
    }

    #[test]
    fn a_full_queue_refuses_the_newest() {
        let d = dir("full");
        let mut q = DiskQueue::open(&d, 2, 1 << 20).unwrap();
        assert!(q.push("a", b"1").unwrap());
        assert!(q.push("b", b"2").unwrap());
        assert!(!q.push("c", b"3").unwrap());
        assert_eq!(q.len(), 2);
        q.pop_front().unwrap();
        assert!(q.push("c", b"3").unwrap());
        drop(q);
        // Bounded by bytes too.
        let d2 = dir("full-bytes");
        let mut q = DiskQueue::open(&d2, 100, 10).unwrap();
        assert!(q.push("a", b"123456").unwrap());
        assert!(!q.push("b", b"123456").unwrap());
        assert!(q.push("c", b"1234").unwrap());
        assert_eq!(q.bytes(), 10);
        drop(q);
        fs::remove_dir_all(d).ok();
        fs::remove_dir_all(d2).ok();
    }

    #[test]
    fn one_process_at_a_time() {
        let d = dir("lock");
        let q = DiskQueue::open(&d, 10, 100).unwrap();
        let e = DiskQueue::open(&d, 10, 100).unwrap_err().to_string();
        assert!(e.contains("in use by another process"), "{e}");
        drop(q);
        DiskQueue::open(&d, 10, 100).unwrap();
        fs::remove_dir_all(d).ok();
    }
}
