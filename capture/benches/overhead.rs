//! What the preload library costs a traced program: nanoseconds per intercepted call (TCP
//! `write` and `read` over a loopback connection, UDP `sendto`/`recvfrom`) and per `read` of a
//! regular file (the descriptor-table fast path), and log bytes per call, compared with
//! `strace -f` on the same workload when strace is installed.
//!
//! The bench re-runs itself as the workload, three times: plain, with `LD_PRELOAD` but no
//! capture directory (the library loaded and idle), and capturing. Each call is a 64-byte
//! `write(2)`/`read(2)`/`sendto(2)`/`recvfrom(2)` through libc. Sends and receives are timed in
//! separate batches (1000 TCP writes then 1000 reads; 100 datagrams then their receipt), so
//! each figure is one kind of call.
//!
//! Run: `cargo build --release -p causeway-preload && cargo bench -p causeway-capture --bench
//! overhead` (`OVERHEAD_N=100000` for a shorter run; default 1,000,000 calls of each kind,
//! strace runs a tenth of that; `CAUSEWAY_PRELOAD=FILE` measures another build of the library).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "CAUSEWAY_OVERHEAD_CHILD";
const KINDS: [&str; 5] = [
    "tcp write",
    "tcp read",
    "udp sendto",
    "udp recvfrom",
    "file read",
];

/// The workload: prints `RESULT <kind> <ns per call>` for each kind.
fn child(n: usize) {
    let buf = [0x5au8; 64];
    let mut rbuf = [0u8; 64];

    // TCP over loopback, with write(2)/read(2) (std::fs::File on the socket's descriptor).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (b, _) = listener.accept().unwrap();
    let mut w = std::fs::File::from(OwnedFd::from(a));
    let mut r = std::fs::File::from(OwnedFd::from(b));
    let (mut tw, mut tr) = (Duration::ZERO, Duration::ZERO);
    let batch = 1000;
    for _ in 0..n / batch {
        let t = Instant::now();
        for _ in 0..batch {
            w.write_all(&buf).unwrap();
        }
        tw += t.elapsed();
        let t = Instant::now();
        for _ in 0..batch {
            r.read_exact(&mut rbuf).unwrap();
        }
        tr += t.elapsed();
    }
    let calls = (n / batch * batch) as f64;
    println!("RESULT tcp write {:.1}", tw.as_nanos() as f64 / calls);
    println!("RESULT tcp read {:.1}", tr.as_nanos() as f64 / calls);

    // UDP: sendto(2) and recvfrom(2) (std's UdpSocket calls them).
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (mut ts, mut trv) = (Duration::ZERO, Duration::ZERO);
    let batch = 100;
    for _ in 0..n / batch {
        let t = Instant::now();
        for _ in 0..batch {
            tx.send_to(&buf, to).unwrap();
        }
        ts += t.elapsed();
        let t = Instant::now();
        for _ in 0..batch {
            rx.recv_from(&mut rbuf).unwrap();
        }
        trv += t.elapsed();
    }
    let calls = (n / batch * batch) as f64;
    println!("RESULT udp sendto {:.1}", ts.as_nanos() as f64 / calls);
    println!("RESULT udp recvfrom {:.1}", trv.as_nanos() as f64 / calls);

    // A regular file: read(2) of 64 bytes, rewinding at the end (1 lseek per 1024 reads).
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&vec![1u8; 64 * 1024]).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        if f.read(&mut rbuf).unwrap() == 0 {
            f.seek(SeekFrom::Start(0)).unwrap();
        }
    }
    println!(
        "RESULT file read {:.1}",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let _ = f.as_raw_fd();
}

fn parse(out: &[u8]) -> Vec<(String, f64)> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("RESULT ")?;
            let (kind, ns) = rest.rsplit_once(' ')?;
            Some((kind.to_string(), ns.parse().ok()?))
        })
        .collect()
}

/// The library next to this binary's profile directory, rebuilt first if its sources changed;
/// or another build of it, to compare (`CAUSEWAY_PRELOAD=FILE`).
fn preload_lib() -> PathBuf {
    if let Some(lib) = std::env::var_os("CAUSEWAY_PRELOAD") {
        return PathBuf::from(lib);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let lib = profile_dir.join("libcauseway_preload.so");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--release", "-p", "causeway-preload"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        built || lib.exists(),
        "run `cargo build --release -p causeway-preload` first"
    );
    lib
}

fn run(n: usize, env: &[(&str, &Path)], wrapper: &[&str]) -> (Vec<(String, f64)>, Duration) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((w, args)) => {
            let mut c = Command::new(w);
            c.args(args).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.env(CHILD_ENV, n.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let out = cmd.output().unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "workload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (parse(&out.stdout), took)
}

fn get(r: &[(String, f64)], kind: &str) -> f64 {
    r.iter()
        .find(|(k, _)| k == kind)
        .map(|(_, v)| *v)
        .unwrap_or(f64::NAN)
}

/// Log bytes and records in a capture directory.
fn log_stats(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut records = 0;
    for f in causeway_capture::read_dir(dir).unwrap() {
        bytes += std::fs::metadata(&f.path).unwrap().len();
        records += causeway_capture::open(&f.path)
            .unwrap()
            .filter(|r| r.is_ok())
            .count() as u64;
    }
    (bytes, records)
}

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        child(n.parse().unwrap());
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is understood.
    let n: usize = std::env::var("OVERHEAD_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let lib = preload_lib();
    let cap = tempfile::tempdir().unwrap();

    let (plain, _) = run(n, &[], &[]);
    let (idle, _) = run(n, &[("LD_PRELOAD", &lib)], &[]);
    let (traced, _) = run(
        n,
        &[("LD_PRELOAD", &lib), ("CAUSEWAY_CAPTURE_DIR", cap.path())],
        &[],
    );
    let (log_bytes, records) = log_stats(cap.path());

    println!("{n} calls of each kind, 64 bytes each; mean ns per call\n");
    println!(
        "{:<14} {:>9} {:>14} {:>11} {:>12}",
        "call", "plain", "preload idle", "capturing", "added ns"
    );
    for k in KINDS {
        let (p, i, t) = (get(&plain, k), get(&idle, k), get(&traced, k));
        println!("{k:<14} {p:>9.1} {i:>14.1} {t:>11.1} {:>12.1}", t - p);
    }
    println!(
        "\nlog: {records} records, {log_bytes} bytes, {:.1} bytes per record",
        log_bytes as f64 / records.max(1) as f64
    );

    let strace = Command::new("strace").arg("-V").output();
    if strace.map(|o| o.status.success()).unwrap_or(false) {
        let sn = (n / 10).max(1000);
        for (label, filter) in [
            ("network", "trace=network"),
            ("network,read,write", "trace=network,read,write"),
        ] {
            let out_file = cap
                .path()
                .join(format!("strace-{}.txt", label.replace(',', "-")));
            let out_str = out_file.to_str().unwrap().to_string();
            let (r, _) = run(sn, &[], &["strace", "-f", "-e", filter, "-o", &out_str]);
            let text = std::fs::read_to_string(&out_file).unwrap_or_default();
            let lines = text.lines().count().max(1);
            println!(
                "\nstrace -f -e {filter} ({sn} calls of each kind): {} bytes, {lines} lines, {:.1} bytes per line",
                text.len(),
                text.len() as f64 / lines as f64
            );
            for k in KINDS {
                println!("  {k:<14} {:>9.1} ns per call", get(&r, k));
            }
        }
    } else {
        println!("\nstrace is not installed: no comparison");
    }
}
