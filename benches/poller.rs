//! Poller harness: the CPU cost of the live TCP-statistics poller (`LivePoller`, a
//! NETLINK_SOCK_DIAG dump of every TCP socket with `tcp_info` and socket memory, at Poisson
//! times), against SNAP's Fig. 8 (under 5% of a core for 1,000 connections at 500 ms).
//!
//! For each size N (default 1,000 and 10,000), the harness opens N established loopback
//! connections (2N sockets in the dump: both ends are on this host; the server ends are held
//! by a helper process so that each process needs N descriptors, and RLIMIT_NOFILE is raised
//! to fit), then runs the poller on the main thread at a 500 ms mean interval for `--seconds`
//! (default 20): once with the CPU budget disabled (the raw cost of dumping every socket on
//! every dump) and once with the default budget (1-5% of a core). It reports the process's CPU
//! time (user + system, `getrusage`) over the run as a share of one core, and the system
//! (kernel) part of it, the dumps done, the
//! sockets and samples per dump, the wall and CPU ms per dump, the share the poller measured
//! itself, and the mean interval and quiet-connection period k it ended with. For reference,
//! it also times one `ss -tinm` over the same sockets (its CPU, as a child process).
//!
//! Other TCP sockets of the network namespace (TIME-WAIT ones from earlier runs included)
//! are dumped too; the sockets-per-dump column shows how many there were.
//!
//! Run: `cargo bench --bench poller` or
//!      `cargo bench --bench poller -- --connections 1000,10000 --seconds 20 --interval-ms 500`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use causeway_sources::tcpstats::netlink::{LivePoller, PollerConfig, dump_once};
use causeway_sources::{Batch, ObservationReader, OriginId};
use harness::{flag, list_flag, which};
use nix::sys::resource::{Resource, UsageWho, getrlimit, getrusage, setrlimit};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--hold") {
        hold(args[2].parse().unwrap());
        return;
    }
    let sizes = list_flag(&args, "--connections").unwrap_or(vec![1_000, 10_000]);
    let seconds: f64 = flag(&args, "--seconds").unwrap_or(20.0);
    let interval_ms: u64 = flag(&args, "--interval-ms").unwrap_or(500);
    if let Err(e) = dump_once(OriginId(0)) {
        eprintln!("cannot dump TCP sockets here: {e}");
        return;
    }
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    let allowed = raise_nofile(largest + 256);
    println!(
        "{:>7} {:<6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>9} {:>7} {:>9} {:>10} {:>3}",
        "conns",
        "budget",
        "CPU %",
        "sys %",
        "dumps",
        "sockets",
        "samples",
        "ms/dump",
        "CPU ms/d",
        "self %",
        "ss CPU ms",
        "interval",
        "k"
    );
    for n in sizes {
        let n = n as usize;
        if n + 256 > allowed {
            println!("{n:>7} skipped: RLIMIT_NOFILE allows {allowed} descriptors");
            continue;
        }
        let conns = open_connections(n);
        let ss_ms = ss_cpu_ms();
        for (label, budget) in [("off", false), ("1-5%", true)] {
            let config = PollerConfig {
                mean_interval: Duration::from_millis(interval_ms),
                cpu_budget: budget,
                ..PollerConfig::default()
            };
            let r = run(config, Duration::from_secs_f64(seconds));
            println!(
                "{:>7} {:<6} {:>6.2} {:>6.2} {:>6} {:>8.0} {:>8.0} {:>8.2} {:>9.2} {:>7.2} {:>9} {:>8.0}ms {:>3}",
                n,
                label,
                r.cpu_percent,
                r.system_percent,
                r.dumps,
                r.sockets_per_dump,
                r.samples_per_dump,
                r.ms_per_dump,
                r.cpu_ms_per_dump,
                r.self_percent,
                ss_ms.map_or("-".to_owned(), |m| format!("{m:.1}")),
                r.interval_ms,
                r.k
            );
        }
        drop(conns);
    }
}

/// Raises the soft (and if need be the hard) limit on open files to `want`; returns the limit
/// in force.
fn raise_nofile(want: usize) -> usize {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let want = want as u64;
    if soft >= want {
        return soft as usize;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want)).is_ok() {
        return want as usize;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard as usize;
    }
    soft as usize
}

/// `n` established loopback connections, each having moved 100 bytes each way: the client
/// ends here, the server ends in a helper process (a copy of this harness run with `--hold`),
/// so that each process needs only `n` descriptors. Both ends close with a reset (SO_LINGER
/// 0), so that no TIME-WAIT sockets are left to swell the next size's dumps.
struct Connections {
    clients: Vec<TcpStream>,
    helper: Child,
}

impl Drop for Connections {
    fn drop(&mut self) {
        self.clients.clear();
        // Closing its stdin tells the helper to close its ends and exit.
        drop(self.helper.stdin.take());
        let _ = self.helper.wait();
    }
}

fn open_connections(n: usize) -> Connections {
    let start = Instant::now();
    let mut helper = Command::new(std::env::current_exe().unwrap())
        .args(["--hold", &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(helper.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().parse().unwrap();
    let mut clients = Vec::with_capacity(n);
    let mut buf = [0u8; 100];
    for _ in 0..n {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(&[b'q'; 100]).unwrap();
        c.read_exact(&mut buf).unwrap();
        rustix::net::sockopt::set_socket_linger(&c, Some(Duration::ZERO)).unwrap();
        clients.push(c);
    }
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    eprintln!(
        "opened {n} loopback connections in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    // Let the last delayed ACKs go out.
    std::thread::sleep(Duration::from_millis(200));
    Connections { clients, helper }
}

/// The helper: listens on loopback, prints its port, accepts `n` connections (answering each
/// one's 100 bytes with 100), prints `ready`, and holds them until its stdin closes.
fn hold(n: usize) {
    raise_nofile(n + 64);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "{}", listener.local_addr().unwrap().port()).unwrap();
    out.flush().unwrap();
    let mut servers = Vec::with_capacity(n);
    let mut buf = [0u8; 100];
    for _ in 0..n {
        let (mut s, _) = listener.accept().unwrap();
        s.read_exact(&mut buf).unwrap();
        s.write_all(&[b'r'; 100]).unwrap();
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
        servers.push(s);
    }
    drop(listener);
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// CPU time (user + system) of one `ss -tinm` run, ms; `None` without ss.
fn ss_cpu_ms() -> Option<f64> {
    let ss = which("ss")?;
    let before = children_cpu();
    let status = Command::new(ss)
        .arg("-tinm")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    status
        .success()
        .then(|| (children_cpu() - before).as_secs_f64() * 1e3)
}

/// (user, system) CPU time.
fn cpu_split(who: UsageWho) -> (Duration, Duration) {
    let u = getrusage(who).unwrap();
    let t =
        |tv: nix::sys::time::TimeVal| Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000);
    (t(u.user_time()), t(u.system_time()))
}

fn children_cpu() -> Duration {
    let (user, system) = cpu_split(UsageWho::RUSAGE_CHILDREN);
    user + system
}

struct Run {
    cpu_percent: f64,
    system_percent: f64,
    dumps: u64,
    sockets_per_dump: f64,
    samples_per_dump: f64,
    ms_per_dump: f64,
    cpu_ms_per_dump: f64,
    self_percent: f64,
    interval_ms: f64,
    k: u32,
}

/// Runs a poller for `length` on this thread, handing batches of 1,024 to nobody.
fn run(config: PollerConfig, length: Duration) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (user0, system0) = cpu_split(UsageWho::RUSAGE_SELF);
    let mut poller = LivePoller::new(OriginId(0), config, stop, Some(start + length)).unwrap();
    let mut batch = Batch::default();
    let mut sockets = 0usize;
    let mut last_dumps = 0;
    while poller.read_batch(1024, &mut batch) {
        batch.tcp.clear();
        let s = poller.status();
        if s.dumps != last_dumps {
            last_dumps = s.dumps;
            sockets += s.sockets;
        }
    }
    let wall = start.elapsed();
    let (user1, system1) = cpu_split(UsageWho::RUSAGE_SELF);
    let (user, system) = (user1 - user0, system1 - system0);
    let s = poller.status();
    let warnings = poller.take_warnings();
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let dumps = s.dumps.max(1) as f64;
    Run {
        cpu_percent: 100.0 * (user + system).as_secs_f64() / wall.as_secs_f64(),
        system_percent: 100.0 * system.as_secs_f64() / wall.as_secs_f64(),
        dumps: s.dumps,
        sockets_per_dump: sockets as f64 / dumps,
        samples_per_dump: s.samples as f64 / dumps,
        ms_per_dump: s.dump_wall_total.as_secs_f64() * 1e3 / dumps,
        cpu_ms_per_dump: s.cpu_total.as_secs_f64() * 1e3 / dumps,
        self_percent: 100.0 * s.cpu_share,
        interval_ms: s.mean_interval.as_secs_f64() * 1e3,
        k: s.quiet_every,
    }
}
