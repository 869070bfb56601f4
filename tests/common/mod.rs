//! Helpers shared by the end-to-end tests: running the binary, real capture tools, network
//! namespaces, bounded test traffic.
//!
//! Tests that need system tools (tcpdump, dumpcap, capinfos, ip) and root fail when those are
//! missing, so that a run without them cannot pass silently. Set
//! `CAUSEWAY_SKIP_SYSTEM_TESTS=1` to skip them explicitly instead (they then print why).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The causeway binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_causeway"))
}

/// Runs causeway with `args`.
pub fn causeway(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run causeway")
}

/// Runs causeway and returns its stdout as JSON lines, failing on a non-zero exit.
pub fn causeway_jsonl(args: &[&str]) -> Vec<serde_json::Value> {
    jsonl_of(&causeway(args), args)
}

/// The JSON lines on the stdout of a run of causeway with `args`, failing on a non-zero
/// exit.
pub fn jsonl_of(out: &Output, args: &[&str]) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "causeway {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            // A pattern's tree nests one level per message: a long chain is deeper than
            // serde_json's default limit.
            causeway_operators::json::from_slice_nested(l.as_bytes())
                .unwrap_or_else(|e| panic!("bad JSON line {l}: {e}"))
        })
        .collect()
}

/// The final `stats` record of `origin` in `records`.
pub fn stats_of<'a>(records: &'a [serde_json::Value], origin: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["kind"] == "stats" && r["origin"] == origin && r["final"] == true)
        .unwrap_or_else(|| panic!("no final stats for {origin} in {records:?}"))
}

/// The final cumulative path patterns of a run (the latest line per id, retractions left
/// out), most expected first: (canonical, count, expected).
pub fn final_patterns(records: &[serde_json::Value]) -> Vec<(String, u64, f64)> {
    let mut last = std::collections::BTreeMap::new();
    for r in records {
        if r["kind"] == "pattern" && r["cumulative"] == true {
            last.insert(
                r["id"].as_str().unwrap().to_owned(),
                (
                    r["canonical"].as_str().unwrap().to_owned(),
                    r["count"].as_u64().unwrap(),
                    r["expected"].as_f64().unwrap(),
                ),
            );
        }
    }
    let mut v: Vec<_> = last.into_values().filter(|p| p.1 > 0).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2));
    v
}

/// A fresh directory under the system's temporary area, removed when the returned guard
/// goes out of scope, unless the test is failing (then it stays for a look; its path names
/// the test and the process).
pub fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("causeway-test-{}-{}", name, std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// A test's scratch directory ([`scratch`]); derefs to its path.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Whether system tests should run; panics (fails the test) when a tool is missing unless the
/// user asked to skip.
pub fn system_tools(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| which(t).is_none())
        .collect();
    let skip = std::env::var("CAUSEWAY_SKIP_SYSTEM_TESTS").is_ok_and(|v| v == "1");
    if missing.is_empty() && is_root() {
        return true;
    }
    let why = if missing.is_empty() {
        "not running as root".to_owned()
    } else {
        format!("missing tools: {}", missing.join(", "))
    };
    if skip {
        eprintln!("skipping system test ({why}; CAUSEWAY_SKIP_SYSTEM_TESTS=1)");
        false
    } else {
        panic!(
            "system test needs {why}; install them (see .ci/run) or set CAUSEWAY_SKIP_SYSTEM_TESTS=1"
        );
    }
}

pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A running capture tool (tcpdump, dumpcap, tshark), stopped with SIGINT as a user would.
pub struct Sniffer {
    child: Child,
    stderr: String,
}

impl Sniffer {
    /// Starts `program args...` and waits until it says it is listening (or 10 s).
    pub fn start(program: &str, args: &[&str]) -> Sniffer {
        Sniffer::start_with(program, args, Stdio::null())
    }

    /// As [`Sniffer::start`], its standard output going to `stdout` (`Stdio::piped()` to
    /// take it with [`Sniffer::stdout`]).
    pub fn start_with(program: &str, args: &[&str], stdout: Stdio) -> Sniffer {
        let mut child = Command::new(program)
            .args(args)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                let _ = tx.send(std::mem::take(&mut line));
            }
        });
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    seen.push_str(&line);
                    if line.contains("listening on") || line.contains("Capturing on") {
                        break;
                    }
                }
                Err(_) if Instant::now() > deadline => panic!("{program} did not start: {seen}"),
                Err(_) => {}
            }
        }
        // The kernel filter is attached once the tool says it listens; give it a moment more.
        std::thread::sleep(Duration::from_millis(300));
        std::thread::spawn(move || for _ in rx.iter() {});
        Sniffer {
            child,
            stderr: seen,
        }
    }

    /// Its standard output, when it was started with `Stdio::piped()`.
    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Stops it with SIGINT and waits for it to write its file.
    pub fn stop(mut self) {
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("capture tool did not stop: {}", self.stderr);
    }
}

/// Sends `n` TCP request/response exchanges and `n` UDP datagrams to `addr`'s listener,
/// bounded in count and time.
pub fn loopback_traffic(listener: TcpListener, udp: UdpSocket, n: usize) {
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4096];
        for _ in 0..n {
            let k = s.read(&mut buf).unwrap_or(0);
            if k == 0 {
                break;
            }
            s.write_all(&vec![b'r'; 3000]).unwrap();
        }
    });
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 3000];
    for i in 0..n {
        c.write_all(format!("request {i}").as_bytes()).unwrap();
        let _ = c.read_exact(&mut buf);
    }
    drop(c);
    server.join().unwrap();
    let target: SocketAddr = udp.local_addr().unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..n {
        sender
            .send_to(format!("datagram {i}").as_bytes(), target)
            .unwrap();
    }
}

/// What capinfos says of a capture: packet count, first and last packet time in ns.
pub fn capinfos(path: &Path) -> (u64, Option<u64>, Option<u64>) {
    let out = Command::new("capinfos")
        .args(["-M", "-T", "-r", "-c", "-a", "-e", "-S"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "capinfos: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.trim_end().split('\t').collect();
    let count = fields[1].parse().unwrap();
    (count, epoch_ns(fields[2]), epoch_ns(fields[3]))
}

/// `1795277883.100882` to ns, exactly.
pub fn epoch_ns(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: u64 = sec.parse().ok()?;
    let mut frac = frac.to_owned();
    frac.truncate(9);
    while frac.len() < 9 {
        frac.push('0');
    }
    Some(sec * 1_000_000_000 + frac.parse::<u64>().ok()?)
}

/// Two network namespaces joined by a veth pair, removed on drop.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub veth_a: String,
    pub ip_a: String,
    pub ip_b: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl NetnsPair {
    /// Creates `cw<tag>a` and `cw<tag>b` with 10.<net>.0.1/24 and .2.
    pub fn new(tag: &str, net: u8) -> NetnsPair {
        let id = std::process::id() % 10_000;
        let a = format!("cw{tag}{id}a");
        let b = format!("cw{tag}{id}b");
        let veth_a = format!("v{tag}{id}a");
        let veth_b = format!("v{tag}{id}b");
        let (ip_a, ip_b) = (format!("10.{net}.0.1"), format!("10.{net}.0.2"));
        let _ = Command::new("ip").args(["netns", "del", &a]).output();
        let _ = Command::new("ip").args(["netns", "del", &b]).output();
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        ip(&[
            "link", "add", &veth_a, "type", "veth", "peer", "name", &veth_b,
        ]);
        ip(&["link", "set", &veth_a, "netns", &a]);
        ip(&["link", "set", &veth_b, "netns", &b]);
        ip(&[
            "-n",
            &a,
            "addr",
            "add",
            &format!("{ip_a}/24"),
            "dev",
            &veth_a,
        ]);
        ip(&[
            "-n",
            &b,
            "addr",
            "add",
            &format!("{ip_b}/24"),
            "dev",
            &veth_b,
        ]);
        for (ns, dev) in [(&a, &veth_a), (&b, &veth_b)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        NetnsPair {
            a,
            b,
            veth_a,
            ip_a,
            ip_b,
        }
    }

    /// A command run inside namespace `ns`.
    pub fn exec(ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.a]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.b]).output();
    }
}

/// A network namespace, removed (with its interfaces and processes' sockets) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates `cw<tag><pid>` with its loopback up.
    pub fn new(tag: &str) -> Netns {
        let name = format!("cw{tag}{}", std::process::id() % 100_000);
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    /// A command run inside the namespace.
    pub fn exec(&self, program: &str) -> Command {
        NetnsPair::exec(&self.name, program)
    }

    /// Runs `program args...` inside the namespace and fails the test if it fails.
    pub fn run(&self, program: &str, args: &[&str]) {
        let out = self.exec(program).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?} in {}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Joins `self` and `other` with a veth pair: `dev` here with `cidr`, `other_dev` there
    /// with `other_cidr`, both up.
    pub fn link(&self, dev: &str, cidr: &str, other: &Netns, other_dev: &str, other_cidr: &str) {
        ip(&[
            "link",
            "add",
            dev,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            other_dev,
            "netns",
            &other.name,
        ]);
        for (ns, dev, cidr) in [(self, dev, cidr), (other, other_dev, other_cidr)] {
            ip(&["-n", &ns.name, "addr", "add", cidr, "dev", dev]);
            ip(&["-n", &ns.name, "link", "set", dev, "up"]);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// A generated multi-tier message trace: `messages` messages (and `extra` generate
/// arguments), in a fresh scratch directory `name`. Returns the directory (bind it: it is
/// removed when dropped), its names file and its trace.
pub fn multi_tier_trace(name: &str, messages: u32, extra: &[&str]) -> (Scratch, String, String) {
    let dir = scratch(name);
    let count = messages.to_string();
    let mut args = vec![
        "--preset",
        "multi-tier",
        "--format",
        "csv",
        "--messages",
        &count,
    ];
    args.extend_from_slice(extra);
    generate(&dir, &args);
    let names = dir.join("names.txt").display().to_string();
    let trace = dir.join("messages.csv").display().to_string();
    (dir, names, trace)
}

/// Runs `causeway generate ARGS -o DIR`, failing on error; returns its report (stderr).
pub fn generate(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(bin())
        .arg("generate")
        .args(args)
        .arg("-o")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "generate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stderr).unwrap()
}

/// The pcap files in `dir` (as the generator writes one per sniffer), sorted, as arguments.
pub fn pcaps_in(dir: &Path) -> Vec<String> {
    let mut inputs: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .map(|p| p.display().to_string())
        .collect();
    inputs.sort();
    inputs
}

/// Waits for `child`, reading its peak RSS as it runs (the kernel's high-water mark,
/// `VmHWM`); returns its exit status and that peak in KiB.
pub fn wait_with_peak_rss(child: &mut Child) -> (std::process::ExitStatus, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut hwm_kib = 0u64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_file) {
            if let Some(v) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            {
                hwm_kib = hwm_kib.max(v);
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            return (status, hwm_kib);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
