//! A corpus of damaged inputs: every complete record before the damage is read, the damage is
//! counted and reported with the file and byte offset, the reader resynchronises where the
//! format allows, files that are not captures fail with one clear line, and nothing panics.
//!
//! The damage is made here from clean captures written by `causeway generate`; files found by
//! fuzzing live in `tests/data/damaged/` and must be read without a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

struct Run {
    status: i32,
    stderr: String,
    records: Vec<serde_json::Value>,
}

fn stats(path: &Path) -> Run {
    let out = Command::new(bin())
        .args(["stats", "--format", "jsonl"])
        .arg(path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "panic on {}: {stderr}",
        path.display()
    );
    let records = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("bad JSON from {}: {e}: {l}", path.display()))
        })
        .collect();
    Run {
        status: out.status.code().unwrap_or(-1),
        stderr,
        records,
    }
}

fn final_stats(run: &Run) -> &serde_json::Value {
    run.records
        .iter()
        .find(|r| r["kind"] == "stats" && r["final"] == true)
        .unwrap_or_else(|| panic!("no stats: {}", run.stderr))
}

fn skipped(st: &serde_json::Value, reason: &str) -> u64 {
    st["skipped"][reason].as_u64().unwrap_or(0)
}

/// A clean capture from the generator, its bytes, and the byte offset of every record.
fn clean(dir: &Path, format: &str) -> (PathBuf, Vec<u8>, Vec<usize>) {
    let out = Command::new(bin())
        .args([
            "generate",
            "--preset",
            "multi-tier",
            "--messages",
            "200",
            "--format",
            format,
            "-o",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = dir.join(format!("mirror.{format}"));
    let bytes = std::fs::read(&path).unwrap();
    let offsets = if format == "pcap" {
        pcap_offsets(&bytes)
    } else {
        pcapng_epb_offsets(&bytes)
    };
    (path, bytes, offsets)
}

fn pcap_offsets(b: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut v = Vec::new();
    while at + 16 <= b.len() {
        v.push(at);
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
    }
    v
}

fn pcapng_epb_offsets(b: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut v = Vec::new();
    while at + 12 <= b.len() {
        let kind = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        if kind == 6 {
            v.push(at);
        }
        at += len;
    }
    v
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The warnings on stderr that name `path`.
fn warnings_for(run: &Run, path: &Path) -> Vec<String> {
    let p = path.display().to_string();
    run.stderr
        .lines()
        .filter(|l| l.contains(&p))
        .map(str::to_owned)
        .collect()
}

#[test]
fn truncated_pcap_yields_complete_records_then_the_offset() {
    let dir = scratch("trunc");
    let (_, bytes, offsets) = clean(&dir, "pcap");
    let k = offsets.len() / 2;
    for (cut, what) in [(offsets[k] + 7, "header"), (offsets[k] + 16 + 10, "record")] {
        let path = write(&dir, &format!("cut-{what}.pcap"), &bytes[..cut]);
        let run = stats(&path);
        assert_eq!(run.status, 0, "{}", run.stderr);
        let st = final_stats(&run);
        assert_eq!(
            st["records"].as_u64(),
            Some(k as u64),
            "cut inside a {what}"
        );
        assert_eq!(skipped(st, "truncated_record"), 1);
        let w = warnings_for(&run, &path);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains(&format!("offset {}", offsets[k])), "{w:?}");
    }
}

#[test]
fn corrupt_pcap_records_are_skipped_and_reading_resynchronises() {
    let dir = scratch("corrupt");
    let (_, bytes, offsets) = clean(&dir, "pcap");
    let n = offsets.len() as u64;
    let k = offsets.len() / 3;

    // An impossible captured length.
    let mut b = bytes.clone();
    b[offsets[k] + 8..offsets[k] + 12].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    let path = write(&dir, "caplen.pcap", &b);
    let run = stats(&path);
    let st = final_stats(&run);
    assert_eq!(st["records"].as_u64(), Some(n - 1), "{}", run.stderr);
    assert_eq!(skipped(st, "corrupt_record"), 1);
    assert!(
        warnings_for(&run, &path)
            .iter()
            .any(|w| w.contains(&format!("offset {}", offsets[k]))),
        "{}",
        run.stderr
    );

    // Garbage between two records.
    let mut b = bytes[..offsets[k]].to_vec();
    b.extend((0..301u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 | 0x80));
    b.extend(&bytes[offsets[k]..]);
    let path = write(&dir, "garbage.pcap", &b);
    let run = stats(&path);
    let st = final_stats(&run);
    assert_eq!(st["records"].as_u64(), Some(n), "{}", run.stderr);
    assert_eq!(skipped(st, "corrupt_record"), 1);

    // Flipped bytes anywhere after the header: no panic, every record accounted for or reported.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..20 {
        let mut b = bytes.clone();
        for _ in 0..40 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = 24 + (seed as usize) % (b.len() - 24);
            b[at] ^= (seed >> 32) as u8 | 1;
        }
        let path = write(&dir, &format!("flipped-{round}.pcap"), &b);
        let run = stats(&path);
        assert_eq!(run.status, 0, "{}", run.stderr);
        let st = final_stats(&run);
        assert!(st["records"].as_u64().unwrap() + skipped(st, "corrupt_record") > 0);
    }
}

#[test]
fn damaged_pcapng_blocks() {
    let dir = scratch("ng");
    let (_, bytes, epbs) = clean(&dir, "pcapng");
    let n = epbs.len() as u64;
    let k = epbs.len() / 2;
    let at = epbs[k];

    // Leading block length that disagrees with the trailing one.
    let mut b = bytes.clone();
    let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap());
    b[at + 4..at + 8].copy_from_slice(&(len + 8).to_le_bytes());
    let path = write(&dir, "length.pcapng", &b);
    let run = stats(&path);
    let st = final_stats(&run);
    assert_eq!(st["records"].as_u64(), Some(n - 1), "{}", run.stderr);
    assert_eq!(skipped(st, "corrupt_record"), 1);
    assert!(
        warnings_for(&run, &path)
            .iter()
            .any(|w| w.contains(&format!("offset {at}"))),
        "{}",
        run.stderr
    );

    // A packet for an interface that was never described.
    let mut b = bytes.clone();
    b[at + 8..at + 12].copy_from_slice(&7u32.to_le_bytes());
    let path = write(&dir, "interface.pcapng", &b);
    let st = final_stats(&stats(&path)).clone();
    assert_eq!(st["records"].as_u64(), Some(n - 1));
    assert_eq!(skipped(&st, "unknown_interface"), 1);

    // An unknown (but well-formed) block: counted, not damage.
    let mut b = bytes[..at].to_vec();
    b.extend(0x0bad_cafeu32.to_le_bytes());
    b.extend(16u32.to_le_bytes());
    b.extend([1, 2, 3, 4]);
    b.extend(16u32.to_le_bytes());
    b.extend(&bytes[at..]);
    let path = write(&dir, "unknown.pcapng", &b);
    let st = final_stats(&stats(&path)).clone();
    assert_eq!(st["records"].as_u64(), Some(n));
    assert_eq!(skipped(&st, "unknown_block"), 1);
    assert_eq!(skipped(&st, "corrupt_record"), 0);

    // Truncated inside a block.
    let path = write(&dir, "cut.pcapng", &bytes[..at + 20]);
    let run = stats(&path);
    let st = final_stats(&run);
    assert_eq!(st["records"].as_u64(), Some(k as u64));
    assert_eq!(skipped(st, "truncated_record"), 1);
    assert!(
        warnings_for(&run, &path)
            .iter()
            .any(|w| w.contains(&format!("offset {at}"))),
        "{}",
        run.stderr
    );
}

#[test]
fn truncated_gzip_reads_up_to_the_damage() {
    let dir = scratch("gz");
    let (path, bytes, offsets) = clean(&dir, "pcap");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &bytes).unwrap();
    let gz = gz.finish().unwrap();
    let cut = write(&dir, "cut.pcap.gz", &gz[..gz.len() / 2]);
    let run = stats(&cut);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let st = final_stats(&run);
    let got = st["records"].as_u64().unwrap();
    assert!(
        got > 0 && got < offsets.len() as u64,
        "{got} of {}",
        offsets.len()
    );
    assert_eq!(warnings_for(&run, &cut).len(), 1, "{}", run.stderr);
    drop(path);
}

#[test]
fn files_that_are_not_inputs_fail_with_one_line() {
    let dir = scratch("notinput");
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            write(
                &dir,
                "page.html",
                b"<!doctype html><html><body>hello</body></html>\n",
            ),
            "not a pcap, pcapng, message-trace or `ss -tin` log file",
        ),
        (write(&dir, "empty.pcap", b""), "empty file"),
        (
            write(
                &dir,
                "short.pcap",
                &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0],
            ),
            "file ends inside the capture header",
        ),
        (
            write(&dir, "junk.bin", &[0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            "not a pcap, pcapng, message-trace or `ss -tin` log file",
        ),
        (
            write(&dir, "bad-header.csv", b"time,from,to\n1,a,b\n"),
            "not a pcap, pcapng, message-trace or `ss -tin` log file",
        ),
        (dir.join("does-not-exist.pcap"), "No such file"),
        (dir.to_path_buf(), "is a directory"),
    ];
    for (path, expect) in cases {
        let run = stats(&path);
        assert_eq!(run.status, 1, "{}: {}", path.display(), run.stderr);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}: {}", path.display(), run.stderr);
        assert!(
            lines[0].contains(&path.display().to_string()),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(expect),
            "{}: {}",
            path.display(),
            lines[0]
        );
    }
}

#[test]
fn bad_trace_rows_are_counted_with_offsets() {
    let dir = scratch("csv");
    let text = "send_ns,recv_ns,src,dst\n1000,2000,10.0.0.1:4000,10.0.0.2:80\nnot-a-number,5,a,b\n3000,,x\n4000,4500,a,b\n";
    let path = write(&dir, "rows.csv", text.as_bytes());
    let run = stats(&path);
    assert_eq!(run.status, 0, "{}", run.stderr);
    let st = final_stats(&run);
    assert_eq!(st["records"].as_u64(), Some(4));
    assert_eq!(skipped(st, "bad_row"), 2);
    let w = warnings_for(&run, &path);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains(&format!("offset {}", text.find("not-a-number").unwrap())),
        "{w:?}"
    );
}

#[test]
fn unsupported_link_type_is_counted() {
    let dir = scratch("linktype");
    let (_, mut bytes, offsets) = clean(&dir, "pcap");
    bytes[20..24].copy_from_slice(&147u32.to_le_bytes()); // LINKTYPE_USER0
    let path = write(&dir, "user0.pcap", &bytes);
    let st = final_stats(&stats(&path)).clone();
    assert_eq!(st["records"].as_u64(), Some(offsets.len() as u64));
    assert_eq!(skipped(&st, "unsupported_linktype"), offsets.len() as u64);
}

#[test]
fn fuzzer_findings_and_committed_corpus_do_not_panic() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/damaged");
    let mut n = 0;
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        let run = stats(&path);
        assert!(
            run.status == 0 || run.status == 1,
            "{}: status {} {}",
            path.display(),
            run.status,
            run.stderr
        );
        if run.status == 1 {
            assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        }
        n += 1;
    }
    assert!(n > 0, "the committed corpus is empty");
}
